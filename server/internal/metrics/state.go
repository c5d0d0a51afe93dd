package metrics

import (
	"context"
	"slices"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reads the state series from Sources at each scrape.
type stateCollector struct {
	src Sources

	watchers, revision, used, quota, noSpace, stages, conns *prometheus.Desc
}

func newStateCollector(src Sources) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &stateCollector{src: src,
		watchers: d("watch_streams", "Watchers of the watch hub open now: KV watch streams, and the server's own followers of the store."),
		revision: d("store_revision", "The store revision this server's watch hub has seen."),
		used:     d("store_size_bytes", "The store's size as counted against its quota."),
		quota:    d("store_quota_bytes", "The storage quota (--quota-bytes); 0 when there is none."),
		noSpace:  d("store_nospace_alarm", "1 while the NOSPACE alarm is raised (writes that add bytes are refused), else 0."),
		stages:   d("rollout_stages", "Stages of the rollouts in flight (each config's newest release, until it is active), by state.", "state"),
		conns:    d("connections_open", "Connections open now."),
	}
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.watchers, c.revision, c.used, c.quota, c.noSpace, c.stages, c.conns} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A usage that cannot be read
// (the store is unreachable) is reported as an invalid metric: the
// handler serves everything else and logs it.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if c.src.Watchers != nil {
		gauge(c.watchers, float64(c.src.Watchers()))
	}
	if c.src.Revision != nil {
		gauge(c.revision, float64(c.src.Revision()))
	}
	if c.src.Connections != nil {
		gauge(c.conns, float64(c.src.Connections()))
	}
	if c.src.Usage != nil {
		ctx, cancel := context.WithTimeout(context.Background(), UsageTimeout)
		used, quota, noSpace, err := c.src.Usage(ctx)
		cancel()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(c.used, err)
		} else {
			gauge(c.used, float64(used))
			gauge(c.quota, float64(quota))
			alarm := 0.0
			if noSpace {
				alarm = 1
			}
			gauge(c.noSpace, alarm)
		}
	}
	if c.src.StageStates != nil {
		states := c.src.StageStates()
		names := make([]string, 0, len(StageStates)+len(states))
		names = append(names, StageStates...)
		for s := range states {
			if !slices.Contains(StageStates, s) {
				names = append(names, s)
			}
		}
		sort.Strings(names)
		for _, s := range names {
			gauge(c.stages, float64(states[s]), s)
		}
	}
}

// StageStates are the states rollout_stages reports, each even at 0, so
// that a query over them never finds a series missing.
var StageStates = []string{"pending", "waiting", "passed", "failed", "stopped"}
