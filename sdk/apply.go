package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/appversion"
	"github.com/pawlcfg/pawl/sdk/canonical"
	"github.com/pawlcfg/pawl/validators/host"
)

// runner applies one config's assignments, one apply at a time (and one
// shadow validation beside it). A new assignment cancels the apply of the
// one it replaces. Its goroutine ends when stop is called or the client
// closes.
type runner struct {
	c      *Client
	config string
	offers chan desired // the newest offer only
	cancel context.CancelFunc
	done   chan struct{}
}

// job is one apply (or shadow validation) in flight.
type job struct {
	a      *pawlv1.Assignment
	cancel context.CancelFunc
	done   chan struct{}
	// settled is closed once the assignment stream says the release's
	// rollout can no longer stop here (it was promoted, or the config is
	// assigned nothing any more): its health is no longer watched.
	settled    chan struct{}
	settleOnce sync.Once
}

// settle ends the watch of the job's release, if any.
func (j *job) settle() { j.settleOnce.Do(func() { close(j.settled) }) }

func (c *Client) startRunner(config string) *runner {
	ctx, cancel := context.WithCancel(c.ctx)
	r := &runner{c: c, config: config, offers: make(chan desired, 1), cancel: cancel, done: make(chan struct{})}
	go r.loop(ctx)
	return r
}

// offer hands the runner the config's newest assignments, replacing an
// offer it has not taken yet.
func (r *runner) offer(d desired) {
	for {
		select {
		case r.offers <- d:
			return
		default:
		}
		select {
		case <-r.offers:
		default:
		}
	}
}

// stop ends the runner and waits for it.
func (r *runner) stop() {
	r.cancel()
	<-r.done
}

func (r *runner) loop(ctx context.Context) {
	defer close(r.done)
	var run, shadow *job
	defer func() {
		for _, j := range []*job{run, shadow} {
			if j != nil {
				j.cancel()
				<-j.done
			}
		}
	}()
	var highestEpoch int64
	if s := r.c.Config(r.config); s != nil {
		highestEpoch = s.Epoch
	}
	// completed holds the assignments this boot finished (applied and
	// reported, or rejected), so a set sent again does not repeat them.
	completed := map[string]bool{}
	finished := make(chan string, 2)
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-finished:
			completed[key] = true
		case d := <-r.offers:
			if a := d.run; a != nil && a.GetEpoch() < highestEpoch {
				r.c.cfg.log.Warn("pawl: ignoring an assignment of a lower epoch", "config", r.config, "generation", a.GetGeneration(),
					"epoch", a.GetEpoch(), "highest_epoch", highestEpoch)
				d.run = nil
				if run != nil {
					d.run = run.a // keep what is in flight
				}
			} else if a != nil {
				highestEpoch = a.GetEpoch()
			}
			run = r.replace(ctx, run, d.run, false, completed, finished)
			shadow = r.replace(ctx, shadow, d.shadow, true, completed, finished)
		}
	}
}

func assignmentKey(a *pawlv1.Assignment, shadow bool) string {
	return fmt.Sprintf("%d/%s/%s/%t", a.GetGeneration(), a.GetContentDigest(), a.GetValidatorDigest(), shadow)
}

// replace moves from job cur to assignment a: it keeps cur when a is the
// same release, starts nothing when a was completed and is what runs, and
// otherwise cancels cur and starts a's.
func (r *runner) replace(ctx context.Context, cur *job, a *pawlv1.Assignment, shadow bool, completed map[string]bool, finished chan<- string) *job {
	if cur != nil {
		select {
		case <-cur.done:
			cur = nil
		default:
		}
	}
	if a == nil {
		// No assignment any more: what was applied stays; a shadow
		// validation in flight is abandoned.
		if cur != nil && shadow {
			cur.cancel()
			<-cur.done
			return nil
		}
		if cur != nil {
			cur.settle() // its rollout is over for this instance
		}
		return cur
	}
	key := assignmentKey(a, shadow)
	if cur != nil && assignmentKey(cur.a, shadow) == key {
		if a.GetStage() == "" {
			cur.settle() // promoted: its rollout can no longer stop
		}
		return cur
	}
	if cur != nil {
		cur.cancel()
		<-cur.done
	}
	if completed[key] {
		if shadow {
			return nil
		}
		if s := r.c.Config(r.config); s != nil && s.Generation == a.GetGeneration() && s.ContentDigest == a.GetContentDigest() && !s.FromCache {
			return nil
		}
	}
	jctx, cancel := context.WithCancel(ctx)
	j := &job{a: a, cancel: cancel, done: make(chan struct{}), settled: make(chan struct{})}
	go func() {
		defer close(j.done)
		if r.c.apply(jctx, a, shadow, j.settled) {
			select {
			case finished <- key:
			case <-jctx.Done():
			}
		}
	}()
	return j
}

// fetched is a downloaded release with its validator module, or, when
// the process's validator runtime had the module loaded already, the
// loaded validator (held until release is called).
type fetched struct {
	release cachedRelease
	// inline says the release came with its assignment on the session,
	// not by a download.
	inline    bool
	module    []byte
	validator *host.Validator
	letGo     func()
}

// let lets go of the loaded validator, if one is held.
func (f *fetched) let() {
	if f.letGo != nil {
		f.letGo()
		f.letGo = nil
	}
}

// apply takes one assignment through every step: download, verify,
// validate, stage, apply, health window, with an ACK after each and a
// span around each; a shadow assignment stops after validation. A canary
// (an assignment through a stage of a rollout that can still stop) that
// passed its window stays under watch until settled is closed or ctx
// ends (see watch). It reports whether the assignment was completed
// (applied and reported, or rejected); false means it was cancelled.
func (c *Client) apply(ctx context.Context, a *pawlv1.Assignment, shadow bool, settled <-chan struct{}) bool {
	ctx, root := c.tracer.Start(ctx, "pawl.rollout", trace.WithAttributes(
		attribute.String("pawl.config", a.GetConfigId()), attribute.Int64("pawl.generation", a.GetGeneration()),
		attribute.String("pawl.stage", a.GetStage()), attribute.Bool("pawl.shadow", shadow), attribute.String("pawl.boot", c.bootID)))
	defer root.End()
	rep := c.newReporter(a)
	defer rep.close()
	rep.post(ctx, pawlv1.InstanceState_INSTANCE_STATE_DISCOVERED, ackExtra{})

	// step runs fn in a span named name; an error rejects the release
	// with the span's trace context, unless ctx ended.
	var rejected bool
	step := func(name string, fn func(ctx context.Context) error) (context.Context, bool) {
		sctx, span := c.tracer.Start(ctx, name)
		defer span.End()
		err := fn(sctx)
		if err == nil {
			return sctx, true
		}
		if ctx.Err() != nil {
			return sctx, false
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		c.cfg.log.Warn("pawl: release rejected", "config", a.GetConfigId(), "generation", a.GetGeneration(), "step", name, "reason", err)
		c.metrics.rejected(sctx, a, name)
		rejected = rep.wait(sctx, pawlv1.InstanceState_INSTANCE_STATE_REJECTED, ackExtra{
			reason: err.Error(), rejectCode: rejectCode(name, err), violations: ackViolations(err)}) == nil || ctx.Err() == nil
		return sctx, false
	}

	var f fetched
	defer func() { f.let() }()
	sctx, ok := step("pawl.download", func(ctx context.Context) (err error) {
		f, err = c.download(ctx, a, false)
		return err
	})
	if !ok {
		return rejected
	}
	rep.post(sctx, pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED, ackExtra{})
	if _, ok := step("pawl.verify", func(ctx context.Context) error {
		// A download that does not match the assignment may be a
		// transient corruption: download again, with backoff, up to the
		// bound, before rejecting.
		// A release that came inline is not a download: one that does
		// not match is downloaded as often as WithDownloadAttempts says.
		b := c.newBackoff()
		first := 1
		if f.inline {
			first = 0
		}
		for attempt := first; ; attempt++ {
			digest, err := c.verify(a, f)
			if digest != "" {
				rep.digest = digest
			}
			if err == nil || !errors.Is(err, errCorrupt) {
				return err
			}
			if attempt >= c.cfg.downloadAttempts {
				return fmt.Errorf("%w (%d downloads, none matched; WithDownloadAttempts sets how many)", err, attempt)
			}
			c.cfg.log.Warn("pawl: a download does not match its assignment; downloading again", "config", a.GetConfigId(),
				"generation", a.GetGeneration(), "attempt", attempt, "of", c.cfg.downloadAttempts, "error", err)
			f.let()
			if !b.wait(ctx) {
				return ctx.Err()
			}
			var derr error
			if f, derr = c.download(ctx, a, true); derr != nil {
				return derr
			}
		}
	}); !ok {
		return rejected
	}
	sctx, ok = step("pawl.validate", func(ctx context.Context) error { return c.validate(ctx, &f) })
	f.let()
	if !ok {
		return rejected
	}
	if c.cache != nil {
		if f.module != nil {
			if err := c.cache.putModule(a.GetValidatorDigest(), f.module); err != nil {
				c.cfg.log.Warn("pawl: caching a validator module failed", "error", err)
			}
		}
		if err := c.cache.putRelease(f.release, c.cfg.retain); err != nil {
			c.cfg.log.Warn("pawl: caching a release failed", "error", err)
		}
	}
	if shadow {
		// A shadow assignment ends here, once VALIDATED was delivered.
		return rep.wait(sctx, pawlv1.InstanceState_INSTANCE_STATE_VALIDATED, ackExtra{}) == nil || ctx.Err() == nil
	}
	rep.post(sctx, pawlv1.InstanceState_INSTANCE_STATE_VALIDATED, ackExtra{})

	var snap *Snapshot
	sctx, _ = step("pawl.stage", func(context.Context) error {
		snap = &Snapshot{
			Config: a.GetConfigId(), Generation: a.GetGeneration(), Epoch: a.GetEpoch(), Stage: a.GetStage(),
			ContentDigest: f.release.ContentDigest, ValidatorDigest: f.release.ValidatorDigest, MediaType: f.release.MediaType,
			Content: f.release.Content,
		}
		return nil
	})
	rep.post(sctx, pawlv1.InstanceState_INSTANCE_STATE_STAGED, ackExtra{})
	// From the swap on, the application may report the canary unhealthy.
	t := c.startTrial(a)
	defer c.endTrial(t)
	var swapped bool
	sctx, ok = step("pawl.apply", func(ctx context.Context) error {
		if c.cfg.applier != nil {
			if err := c.cfg.applier(ctx, snap); err != nil {
				return fmt.Errorf("the application's applier failed: %w", err)
			}
		}
		snap.AppliedAt = time.Now()
		swapped = c.swap(ctx, snap)
		return nil
	})
	if !ok {
		return rejected
	}
	if !swapped {
		return false
	}
	c.metrics.applied(sctx, snap)
	if c.cache != nil {
		if err := c.cache.setApplied(snap); err != nil {
			c.cfg.log.Warn("pawl: recording the applied generation in the cache failed", "error", err)
		}
	}
	// The health window starts once the server has APPLIED: it counts a
	// HEALTHY_ACKED only a window after the APPLIED arrived.
	if err := rep.wait(sctx, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, ackExtra{}); err != nil && ctx.Err() != nil {
		return false
	}

	hctx, span := c.tracer.Start(ctx, "pawl.health_window")
	window := time.Duration(f.release.HealthWindow)
	extra, sent, ok := c.healthWindow(hctx, snap, window, t, settled)
	if !extra.healthOK {
		span.SetStatus(codes.Error, extra.reason)
	}
	span.End()
	if !ok {
		return false
	}
	err := rep.wait(hctx, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, extra)
	if sent != nil {
		sent <- err
	}
	completed := err == nil || ctx.Err() == nil
	b := f.release.Budgets[a.GetStage()]
	if t != nil && err == nil && extra.healthOK && b.breach(*extra.health) == "" {
		// Healthy within its budget, and its rollout can still stop: keep
		// watching, so that a failure after the window reaches it.
		root.End()
		c.watch(ctx, rep, snap, t, settled, b, window)
	}
	return completed
}

// download fetches the release (content, without membership) and its
// validator module, from the cache when it holds them, or the release
// from what the session sent with the assignment (both unless fresh),
// retrying transient failures until ctx ends. A cached release whose
// digests are not the assignment's was rewritten on disk (the cache is
// not its own authority): it is dropped and downloaded again.
func (c *Client) download(ctx context.Context, a *pawlv1.Assignment, fresh bool) (fetched, error) {
	var f fetched
	if c.cache != nil && !fresh {
		if r, ok := c.cache.release(a.GetConfigId(), a.GetGeneration()); ok {
			if r.ContentDigest == a.GetContentDigest() && r.ValidatorDigest == a.GetValidatorDigest() {
				f.release = r
			} else {
				c.cfg.log.Warn("pawl: a cached release does not have the digests its assignment names; dropped and downloaded again",
					"config", a.GetConfigId(), "generation", a.GetGeneration(), "cached_digest", r.ContentDigest, "assigned_digest", a.GetContentDigest())
				c.cache.dropRelease(a.GetConfigId(), a.GetGeneration())
			}
		}
	}
	if f.release.Config == "" && !fresh {
		// Sent with the assignment on the session: verified as a
		// download is.
		if f.release, f.inline = c.inline.get(a); f.inline {
			trace.SpanFromContext(ctx).SetAttributes(attribute.Bool("pawl.release_inline", true))
		}
	}
	if f.release.Config == "" {
		err := c.retry(ctx, "download release", func(ctx context.Context) error {
			resp, err := c.releases.GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{
				ConfigId: a.GetConfigId(), Generation: a.GetGeneration(), OmitMembership: true,
				WorkloadIdentity: c.cfg.instance.WorkloadIdentity, // an instance credential downloads only what this identity is assigned
			}))
			if err != nil {
				return err
			}
			f.release = releaseFromProto(resp.Msg.GetRelease())
			return nil
		})
		if err != nil {
			return f, fmt.Errorf("download %s generation %d: %w", a.GetConfigId(), a.GetGeneration(), err)
		}
	}
	digest := a.GetValidatorDigest()
	if c.cache == nil || c.cache.hasModule(digest) {
		if v, release := c.runtime.take(digest); v != nil {
			// Loaded in this process already, verified by its digest
			// then: neither downloaded nor read again.
			f.validator, f.letGo = v, release
			return f, nil
		}
	}
	if c.cache != nil && !fresh {
		f.module = c.cache.module(digest)
	}
	if f.module == nil {
		err := c.retry(ctx, "download validator", func(ctx context.Context) (err error) {
			f.module, err = c.downloadModule(ctx, digest)
			return err
		})
		if err != nil {
			return f, fmt.Errorf("download validator %s: %w", digest, err)
		}
	}
	return f, nil
}

// maxModuleSize bounds a validator module download.
const maxModuleSize = 256 << 20

// downloadModule streams one validator module.
func (c *Client) downloadModule(ctx context.Context, digest string) ([]byte, error) {
	stream, err := c.validators.Download(ctx, connect.NewRequest(&pawlv1.DownloadRequest{Digest: digest, WorkloadIdentity: c.cfg.instance.WorkloadIdentity}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var wasm []byte
	var size int64 = -1
	for stream.Receive() {
		switch m := stream.Msg(); {
		case m.GetValidator() != nil:
			size = m.GetValidator().GetSizeBytes()
			if size > maxModuleSize {
				return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the module is %d bytes, over the limit of %d", size, maxModuleSize))
			}
			wasm = make([]byte, 0, size)
		default:
			if len(wasm)+len(m.GetChunk()) > maxModuleSize {
				return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the module is over the limit of %d bytes", maxModuleSize))
			}
			wasm = append(wasm, m.GetChunk()...)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if size >= 0 && int64(len(wasm)) != size {
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("the download ended after %d of %d bytes", len(wasm), size))
	}
	return wasm, nil
}

// verify checks a download against the assignment: the release is the one
// assigned, its content hashes to the assigned digest, it names the
// assigned validator, the module hashes to that digest, and this instance's
// app version is recent enough. It returns the content digest it computed.
func (c *Client) verify(a *pawlv1.Assignment, f fetched) (string, error) {
	r := f.release
	corrupt := func(format string, args ...any) error { return mark(fmt.Errorf(format, args...), errCorrupt) }
	computed, err := canonical.Digest(r.MediaType, r.Content)
	if err != nil {
		return "", corrupt("content digest mismatch: the content cannot be canonicalized: %w", err)
	}
	switch {
	case r.Config != a.GetConfigId() || r.Generation != a.GetGeneration():
		return computed, corrupt("the server sent %s generation %d for an assignment of %s generation %d", r.Config, r.Generation, a.GetConfigId(), a.GetGeneration())
	case computed != a.GetContentDigest():
		return computed, corrupt("content digest mismatch: the content hashes to %s, the assignment names %s", computed, a.GetContentDigest())
	case r.ContentDigest != a.GetContentDigest():
		return computed, corrupt("content digest mismatch: the release names %s, the assignment %s", r.ContentDigest, a.GetContentDigest())
	case r.ValidatorDigest != a.GetValidatorDigest():
		return computed, corrupt("wrong validator: the release names %s, the assignment %s", r.ValidatorDigest, a.GetValidatorDigest())
	}
	if f.validator == nil { // a loaded validator was verified when it was loaded
		if got := host.Digest(f.module); got != a.GetValidatorDigest() {
			return computed, corrupt("wrong validator: the module downloaded hashes to %s, not %s", got, a.GetValidatorDigest())
		}
	}
	if r.MinAppVersion != "" {
		floor, err := appversion.Parse(r.MinAppVersion)
		if err != nil || !appversion.AtLeast(c.cfg.instance.AppVersion, floor) {
			return computed, mark(fmt.Errorf("app version too old: %q is below the release's minimum %q", c.cfg.instance.AppVersion, r.MinAppVersion), errAppTooOld)
		}
	}
	return computed, nil
}

// validate runs the release's validator on its content, with the input
// validators/ABI.md defines for a release.
func (c *Client) validate(ctx context.Context, f *fetched) error {
	// The time limit is wall-clock time: on a starved machine it can stop
	// a validation (or the module's start) that passes on a quiet one, as
	// the server's did. A stop by the limit is tried again before it
	// rejects the release.
	for attempt := 1; ; attempt++ {
		err := c.validateOnce(ctx, f)
		if !errors.Is(err, host.ErrTimeout) || ctx.Err() != nil {
			return err
		}
		if attempt == validateAttempts {
			return fmt.Errorf("%w (%d attempts)", err, attempt)
		}
		c.cfg.log.Warn("pawl: the validator ran past its time limit; validating again (the machine may be busy)",
			"config", f.release.Config, "generation", f.release.Generation, "attempt", attempt+1, "error", err)
	}
}

// validateOnce loads f's validator (unless loaded) and runs it once on
// f's content.
func (c *Client) validateOnce(ctx context.Context, f *fetched) error {
	v := f.validator
	if v == nil {
		var err error
		if v, f.letGo, err = c.runtime.load(ctx, f.release.ValidatorDigest, f.module); err != nil {
			if ctx.Err() == nil {
				err = mark(err, errUnloadable)
			}
			return fmt.Errorf("the validator %s cannot be loaded: %w", f.release.ValidatorDigest, err)
		}
		f.validator = v
	}
	res, err := v.Validate(ctx, host.Input{
		Config: f.release.Content, MediaType: f.release.MediaType, Name: f.release.Config, Params: f.release.Params,
	})
	if err != nil {
		return fmt.Errorf("the validator %s failed: %w", f.release.ValidatorDigest, err)
	}
	if !res.Valid {
		var b strings.Builder
		b.WriteString("the validator rejected the content:")
		// The reason reaches the server and whoever reads the rollout: the
		// secret values the validator marked must not.
		secrets := host.SecretValues(f.release.Content, res.Secrets)
		violations := host.RedactViolations(res.Violations, secrets)
		for _, v := range violations {
			fmt.Fprintf(&b, " [%s] %s: %s;", v.Severity, v.Path, v.Message)
		}
		return &invalidContent{msg: strings.TrimSuffix(b.String(), ";"), violations: violations}
	}
	return nil
}

// validateAttempts is how many times a validation that the time limit
// stopped is run before the release is rejected.
const validateAttempts = 3

// Kinds of failure that decide what happens next, matched with errors.Is:
// the validator refused the content; its module cannot be loaded; a
// download does not hash to what the assignment names (downloaded again,
// up to WithDownloadAttempts).
var (
	errInvalidContent = errors.New("sdk: the validator rejected the content")
	errUnloadable     = errors.New("sdk: the validator cannot be loaded")
	errCorrupt        = errors.New("sdk: the download does not match the assignment")
)

// marked is an error that also matches a kind, without changing its
// message.
type marked struct{ err, kind error }

func mark(err, kind error) error { return &marked{err: err, kind: kind} }

func (e *marked) Error() string        { return e.err.Error() }
func (e *marked) Unwrap() error        { return e.err }
func (e *marked) Is(target error) bool { return target == e.kind }

// healthWindow holds the release on trial for window: the application's
// health check runs right after the swap, every health interval through
// the window and at its end, and its first failure ends the window at
// once, unhealthy; the requests
// the middleware measured from the swap to the end of the window (every
// request the new generation served, including those before the server
// had the APPLIED) give the error rate and p99. A report of the
// application's (ReportUnhealthy) on the canary's trial t ends the window
// at once, unhealthy, until settled says the rollout can no longer stop.
// It returns the HEALTHY_ACKED report, the channel that awaits its
// outcome (the application's report's, or nil), and false when ctx ended
// first.
func (c *Client) healthWindow(ctx context.Context, s *Snapshot, window time.Duration, t *trial, settled <-chan struct{}) (ackExtra, chan error, bool) {
	start := s.AppliedAt
	check := func() error {
		if c.cfg.healthCheck == nil {
			return nil
		}
		return c.cfg.healthCheck(ctx, s)
	}
	unhealthy := func(err error) (ackExtra, chan error, bool) {
		if ctx.Err() != nil {
			return ackExtra{}, nil, false
		}
		m := c.health.since(start)
		return ackExtra{reason: "health check failed: " + err.Error(), health: &m}, nil, true
	}
	if err := check(); err != nil {
		return unhealthy(err)
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	var poll <-chan time.Time
	if c.cfg.healthCheck != nil && c.cfg.healthInterval < window {
		tick := time.NewTicker(c.cfg.healthInterval)
		defer tick.Stop()
		poll = tick.C
	}
	reports := t.reportsOf()
	for waiting := true; waiting; {
		select {
		case <-timer.C:
			waiting = false
		case <-poll:
			if err := check(); err != nil {
				return unhealthy(err)
			}
		case <-settled:
			// Promoted, or no longer assigned: the application's reports
			// would decide nothing any more.
			c.endTrial(t)
			reports, settled = nil, nil
		case r := <-reports:
			m := c.health.since(start)
			return ackExtra{reason: "reported by the application: " + r.reason, health: &m}, r.sent, true
		case <-ctx.Done():
			return ackExtra{}, nil, false
		}
	}
	if err := check(); err != nil {
		return unhealthy(err)
	}
	if ctx.Err() != nil {
		return ackExtra{}, nil, false
	}
	m := c.health.since(start)
	return ackExtra{healthOK: true, health: &m}, nil, true
}
