package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// DefaultInterval is how often promote --wait and rollout status --watch
// read a rollout's status: often enough to follow ACKs that arrive over
// a health window of a minute, rarely enough to cost the server nothing.
const DefaultInterval = 2 * time.Second

// rolloutVerdict says where a release's rollout is: done (every stage
// passed and coverage met while it is a candidate, or it is the active
// generation), waiting (and on what), or over without it ever being
// promotable (err).
func rolloutVerdict(config string, gen int64, st *pawlv1.GetRolloutStatusResponse) (done bool, waiting string, err error) {
	state := strings.TrimPrefix(st.GetState().String(), "RELEASE_STATE_")
	switch st.GetState() {
	case pawlv1.ReleaseState_RELEASE_STATE_ACTIVE:
		return true, "", nil
	case pawlv1.ReleaseState_RELEASE_STATE_CANDIDATE:
	default:
		why := ""
		if stop := st.GetStop(); stop != nil {
			why = ": " + stop.GetReason()
		}
		return false, "", fmt.Errorf("%s generation %d is %s%s; it can no longer be promoted", config, gen, state, why)
	}
	for _, s := range st.GetStages() {
		switch s.GetOutcome() {
		case "passed":
		case "failed":
			return false, "", fmt.Errorf("%s generation %d: stage %s failed: %s", config, gen, s.GetName(), s.GetReason())
		default:
			return false, fmt.Sprintf("stage %s is %s, %d/%d healthy, %d rejected: %s", s.GetName(), s.GetOutcome(),
				s.GetHealthy(), s.GetMembers(), s.GetRejected(), s.GetReason()), nil
		}
	}
	if c := st.GetCoverage(); c != nil && c.GetReported() < c.GetRequired() {
		return false, fmt.Sprintf("coverage: %s; promote needs %d members to have reported", c.GetSummary(), c.GetRequired()), nil
	}
	return true, "", nil
}

// followRollout reads the release's status every interval and hands each
// reading, with what it waits on, to show, until the rollout is done
// (nil), can never be promoted (that error), or ctx ends. ackPage is the
// ACK page size of each reading (0: the server's default).
func (g *globals) followRollout(ctx context.Context, config string, gen int64, every time.Duration, ackPage int32,
	show func(st *pawlv1.GetRolloutStatusResponse, waiting string) error,
) (*pawlv1.GetRolloutStatusResponse, error) {
	rs := g.rollouts()
	for {
		resp, err := rs.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: config, Generation: gen, AckPageSize: ackPage}))
		if err != nil {
			return nil, err
		}
		done, waiting, verr := rolloutVerdict(config, gen, resp.Msg)
		if err := show(resp.Msg, waiting); err != nil {
			return nil, err
		}
		if done || verr != nil {
			return resp.Msg, verr
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped waiting for %s generation %d (%s): %w", config, gen, waiting, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// awaitPromotable waits until the release can be promoted, saying on
// stderr what it waits on each time that changes. It reports whether the
// release is already the active generation.
func (g *globals) awaitPromotable(ctx context.Context, config string, gen int64, every time.Duration) (active bool, err error) {
	last := ""
	st, err := g.followRollout(ctx, config, gen, every, 1, func(_ *pawlv1.GetRolloutStatusResponse, waiting string) error {
		if waiting != "" && waiting != last {
			last = waiting
			g.notef("waiting to promote %s generation %d: %s", config, gen, waiting)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return st.GetState() == pawlv1.ReleaseState_RELEASE_STATE_ACTIVE && st.GetPointer().GetGeneration() == gen, nil
}

// watchStatus follows a release until its rollout is done or over. On a
// terminal it redraws the whole status at each reading; elsewhere it
// appends one line per reading that differs from the last: the state and
// each stage's progress.
func (g *globals) watchStatus(ctx context.Context, config string, gen int64, every time.Duration) error {
	redraw := isTerminal(g.stdout)
	last := ""
	_, err := g.followRollout(ctx, config, gen, every, 0, func(st *pawlv1.GetRolloutStatusResponse, _ string) error {
		if redraw {
			fmt.Fprint(g.stdout, "\x1b[H\x1b[2J") // home, clear screen
			return printStatus(g, config, gen, st, false)
		}
		line := progressLine(config, gen, st)
		if line == last {
			return nil
		}
		last = line
		_, err := fmt.Fprintln(g.stdout, line)
		return err
	})
	if err != nil {
		return err
	}
	return nil
}

// progressLine is one line of a release's progress: its state, then each
// stage's outcome and healthy members, e.g. "routing generation 2
// CANDIDATE: canary passed 2/2, zones waiting 3/4 (zone "c" has 0 of 1
// healthy, needs 1)".
func progressLine(config string, gen int64, st *pawlv1.GetRolloutStatusResponse) string {
	stages := make([]string, 0, len(st.GetStages()))
	for _, s := range st.GetStages() {
		part := fmt.Sprintf("%s %s %d/%d", s.GetName(), s.GetOutcome(), s.GetHealthy(), s.GetMembers())
		if s.GetRejected() > 0 {
			part += fmt.Sprintf(" %d rejected", s.GetRejected())
		}
		if s.GetOutcome() != "passed" && s.GetReason() != "" {
			part += " (" + s.GetReason() + ")"
		}
		stages = append(stages, part)
	}
	return fmt.Sprintf("%s generation %d %s: %s", config, gen, strings.TrimPrefix(st.GetState().String(), "RELEASE_STATE_"), strings.Join(stages, ", "))
}

// isTerminal reports whether w is a character device (a terminal), where
// a redrawn screen reads better than appended lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// notef writes one "pawl: ..." line on stderr, serialised with the other
// notices.
func (g *globals) notef(format string, args ...any) {
	g.stderrMu.Lock()
	defer g.stderrMu.Unlock()
	fmt.Fprintf(g.stderr, "pawl: "+format+"\n", args...)
}

// slowNotice says on stderr what a command is doing once it has taken
// g.progressAfter (--progress-after; at once when that is 0), and how long
// it took when it ends. The returned function ends it.
func (g *globals) slowNotice(what string) (done func()) {
	start := time.Now()
	finish := func() { g.notef("%s: done in %s", what, time.Since(start).Round(time.Millisecond)) }
	if g.progressAfter <= 0 {
		g.notef("%s...", what)
		return finish
	}
	said := make(chan struct{})
	timer := time.AfterFunc(g.progressAfter, func() {
		defer close(said)
		g.notef("%s...", what)
	})
	return func() {
		if timer.Stop() {
			return // quick: nothing was said
		}
		<-said
		finish()
	}
}
