package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// waitFlag is --wait MIN[,MAX], consul-template's quiet period: --exec runs
// once no change has come for MIN, and at the latest MAX after the first
// change it covers. Zero runs it as soon as a batch is written.
type waitFlag struct{ min, max time.Duration }

// String is the flag's value as given.
func (w *waitFlag) String() string {
	if w.min == 0 && w.max == 0 {
		return "0"
	}
	return w.min.String() + "," + w.max.String()
}

// Set parses MIN or MIN,MAX; MAX defaults to four times MIN, as
// consul-template's does.
func (w *waitFlag) Set(v string) error {
	lo, hi, two := strings.Cut(v, ",")
	mn, err := time.ParseDuration(lo)
	if err != nil || mn < 0 {
		return fmt.Errorf("%q is not MIN[,MAX] with MIN a duration of zero or more, such as 2s,10s", v)
	}
	mx := 4 * mn
	if two {
		if mx, err = time.ParseDuration(hi); err != nil || mx < mn {
			return fmt.Errorf("%q is not MIN,MAX with MAX a duration at least MIN, such as 2s,10s", v)
		}
	}
	w.min, w.max = mn, mx
	return nil
}

// changed records that a batch of files was written or removed, and wakes
// the --exec runner. snap names the config snapshot written (empty for
// keys), whose health waits for the run that covers it; files are the
// paths, for PAWL_FILES.
func (a *agent) changed(snap string, files ...string) {
	a.mu.Lock()
	if snap != "" {
		a.pendingSnaps = append(a.pendingSnaps, snap)
		a.awaiting[snap] = true
	}
	a.pendingFiles = append(a.pendingFiles, files...)
	a.mu.Unlock()
	select {
	case a.dirty <- struct{}{}:
	default:
	}
}

// runExec runs --exec once per batch of changes until ctx ends, first at
// once, without --wait's quiet period: the initial sync is written when it
// starts. With --wait, a batch is every change until a quiet period of
// MIN, or MAX after its first.
func (a *agent) runExec(ctx context.Context) {
	_ = a.pass(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.dirty:
		}
		if a.o.wait.max > 0 && !a.quiet(ctx) {
			return
		}
		_ = a.pass(ctx)
	}
}

// pass renders the templates and runs --exec once for every change
// pending, records how it ended for the configs written, and marks the
// initial sync done. It returns the error of a template or of --exec.
func (a *agent) pass(ctx context.Context) error {
	a.mu.Lock()
	snaps, files := a.pendingSnaps, a.pendingFiles
	a.pendingSnaps, a.pendingFiles = nil, nil
	a.mu.Unlock()
	rendered, rerr := a.render()
	if rerr != nil {
		a.log.Warn("a template failed; its file is left as it was", "error", rerr)
	}
	files = append(files, rendered...)
	a.mu.Lock()
	first := !a.synced
	a.synced = true
	a.mu.Unlock()
	if !first && len(snaps) == 0 && len(files) == 0 {
		// A wake-up whose changes an earlier run took: nothing to run for.
		return rerr
	}
	env := []string{"PAWL_FILES=" + strings.Join(files, "\n")}
	if len(snaps) == 1 && len(files) == 1 {
		// One config: the variables each run had before batches.
		config, gen, _ := strings.Cut(snaps[0], "@")
		env = append(env, "PAWL_CONFIG="+config, "PAWL_GENERATION="+gen, "PAWL_FILE="+files[0])
	}
	err := a.exec(ctx, a.o.execCmd, env...)
	if err != nil {
		a.log.Warn("--exec failed", "files", len(files), "error", err)
	}
	a.mu.Lock()
	for _, s := range snaps {
		a.execErr[s] = err
		delete(a.awaiting, s)
	}
	close(a.execRan)
	a.execRan = make(chan struct{})
	a.mu.Unlock()
	return errors.Join(rerr, err)
}

// notReady says why the agent is not ready ("" when it is): its initial
// sync is not written yet, or a --config has no snapshot yet.
func (a *agent) notReady() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.synced {
		return "the initial sync is not written yet"
	}
	for _, id := range a.o.configs {
		if a.configs[id] == nil {
			return "config " + id + " has no snapshot yet"
		}
	}
	return ""
}

// quiet waits until no change has come for --wait's MIN, or its MAX has
// passed since the first; false when ctx ended first.
func (a *agent) quiet(ctx context.Context) bool {
	first := time.Now()
	last := first
	for {
		until := last.Add(a.o.wait.min)
		if latest := first.Add(a.o.wait.max); latest.Before(until) {
			until = latest
		}
		d := until.Sub(time.Now())
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-a.dirty:
			last = time.Now()
		case <-t.C:
		}
		t.Stop()
	}
}

// execOutcome waits for the --exec run that covers the write of snapshot
// snap and returns how it ended; nil for a snapshot the agent did not write.
func (a *agent) execOutcome(ctx context.Context, snap string) error {
	for {
		a.mu.Lock()
		err, waiting, ran := a.execErr[snap], a.awaiting[snap], a.execRan
		a.mu.Unlock()
		if !waiting {
			return err
		}
		select {
		case <-ran:
		case <-ctx.Done():
			return fmt.Errorf("waiting for --exec after writing %s: %w", snap, ctx.Err())
		}
	}
}
