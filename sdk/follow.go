package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/configid"
)

// follow follows the instance's assignments until the client closes: on
// its session (session.go), or, against a server without one, by
// registering and following its assignment stream. Either holds the
// instance's lease while it is open, resumes after the last revision seen
// when it reconnects (waiting with backoff and jitter), and takes a full
// set after a compaction. Each config's assignments go to its runner. Its
// exit is Close.
func (c *Client) follow() {
	defer c.wg.Done()
	as := &assignmentState{set: map[string][]*pawlv1.Assignment{}, runners: map[string]*runner{}}
	defer as.stop()
	b := c.newBackoff()
	for c.ctx.Err() == nil {
		var err error
		var what string
		if at, ok := c.sess.use(); ok {
			err = c.runSession(c.ctx, at, as, b)
			if c.ctx.Err() != nil {
				return
			}
			if noSession(err) {
				// An older server: the unary calls, at once, and from now
				// on for this server.
				c.sess.fallBack(at, err)
				continue
			}
			what = "the session (resuming after revision " + strconv.FormatInt(as.after, 10) + ")"
		} else {
			if c.epoch.Load() == 0 {
				if err := c.register(c.ctx); err != nil {
					if c.ctx.Err() == nil {
						c.linkChanged(false, err)
						c.linkFailed("register", err)
					}
					b.wait(c.ctx)
					continue
				}
			}
			// Against a server that had no session, until it is time to
			// ask it again.
			ctx, cancel := c.ctx, context.CancelFunc(func() {})
			if until := c.sess.unaryUntil(); !until.IsZero() {
				ctx, cancel = context.WithDeadline(c.ctx, until)
			}
			err = c.watchAssignments(ctx, as, b)
			retry := ctx.Err() != nil
			cancel()
			if c.ctx.Err() != nil {
				return
			}
			if retry {
				continue
			}
			what = "the assignment stream (resuming after revision " + strconv.FormatInt(as.after, 10) + ")"
		}
		c.linkChanged(false, err)
		switch connect.CodeOf(err) {
		case connect.CodeFailedPrecondition, connect.CodeNotFound:
			// The server does not know this boot's registration (its
			// store was replaced, or another process registered the same
			// identity): register again, with a new membership epoch.
			c.epoch.Store(0)
		case connect.CodeInvalidArgument:
			// Most likely a revision beyond the server's: a server that
			// lost its data. Start over with a full set.
			as.after = 0
		}
		c.linkFailed(what, err)
		b.wait(c.ctx)
	}
}

// register registers the instance with this boot and keeps the membership
// epoch the server returned.
func (c *Client) register(ctx context.Context) error {
	resp, err := c.instances.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: c.instance()}))
	if err != nil {
		return fmt.Errorf("sdk: register %s: %w", c.cfg.instance.WorkloadIdentity, err)
	}
	return c.registered(resp.Msg.GetRecord())
}

// instance is this boot's instance, as it registers.
func (c *Client) instance() *pawlv1.Instance {
	in := c.cfg.instance
	return &pawlv1.Instance{
		WorkloadIdentity: in.WorkloadIdentity, BootId: c.bootID, Zone: in.Zone, Role: in.Role,
		TrafficWeight: in.TrafficWeight, AppVersion: in.AppVersion, Labels: in.Labels,
	}
}

// registered keeps the membership epoch of the registration the server
// returned (by Register, or a session's start).
func (c *Client) registered(rec *pawlv1.InstanceRecord) error {
	epoch := rec.GetMembershipEpoch()
	if epoch <= 0 {
		return fmt.Errorf("sdk: register %s: the server returned no membership epoch", c.cfg.instance.WorkloadIdentity)
	}
	c.epoch.Store(epoch)
	return nil
}

// assignmentState is what the client holds of its assignments across
// streams and sessions: each config's assignments, the revision of the
// last message taken, and each config's runner. Only the follow goroutine
// uses it.
type assignmentState struct {
	after   int64
	set     map[string][]*pawlv1.Assignment
	runners map[string]*runner
}

// stop stops every runner.
func (as *assignmentState) stop() {
	for _, r := range as.runners {
		r.stop()
	}
}

// watchAssignments runs one assignment stream until it fails, taking
// each message (see take).
func (c *Client) watchAssignments(ctx context.Context, as *assignmentState, b *backoff) error {
	stream, err := c.instances.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{
		WorkloadIdentity: c.cfg.instance.WorkloadIdentity, BootId: c.bootID, Deltas: true, AfterRevision: as.after,
	}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		b.reset()
		c.linkChanged(true, nil)
		c.linkWorks()
		c.take(as, stream.Msg(), nil)
	}
	err = stream.Err()
	if err == nil {
		// The server ended the stream (it is shutting down): the client
		// is cut off until it reconnects, as if the connection broke.
		err = connect.NewError(connect.CodeUnavailable, fmt.Errorf("the server ended the assignment stream: %w", io.EOF))
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// take takes one message of assignments, from a stream or a session
// (with the releases it carries, rels): it keeps as current and offers
// each change to the config's runner. A message older than the set held
// is ignored (never go back to an older set); an assignment the server
// cannot have sent is refused.
func (c *Client) take(as *assignmentState, msg *pawlv1.WatchAssignmentsResponse, rels []*pawlv1.Release) {
	if msg.GetRevision() < as.after {
		return // never go back to an older set
	}
	c.inline.keep(msg, rels)
	changed := map[string]bool{}
	if msg.GetFull() {
		for config := range as.set {
			changed[config] = true
		}
		clear(as.set)
	}
	for _, id := range msg.GetRemovedConfigIds() {
		delete(as.set, id)
		changed[id] = true
	}
	delta := map[string][]*pawlv1.Assignment{}
	for _, a := range msg.GetAssignments() {
		// A config ID becomes a file name in the cache and the agent's
		// directory: one the server could never have accepted (a man in
		// the middle of a plain http:// link) is refused before any use.
		if err := errors.Join(configid.Check(a.GetConfigId()), configid.CheckGeneration(a.GetGeneration())); err != nil {
			c.cfg.log.Warn("pawl: refused an assignment the server cannot have sent", "server", c.Server(), "error", err)
			continue
		}
		delta[a.GetConfigId()] = append(delta[a.GetConfigId()], a)
	}
	for id, a := range delta {
		as.set[id] = a
		changed[id] = true
	}
	as.after = msg.GetRevision()
	ids := make([]string, 0, len(changed))
	for id := range changed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !c.cfg.follows(id) {
			continue
		}
		r := as.runners[id]
		if r == nil {
			c.mu.Lock()
			c.assigned[id] = true
			c.mu.Unlock()
			r = c.startRunner(id)
			as.runners[id] = r
		}
		r.offer(desiredOf(as.set[id]))
	}
}

// desired is what a config's assignments ask of the instance: a generation
// to run, and one to validate in a shadow stage.
type desired struct {
	run, shadow *pawlv1.Assignment
}

func desiredOf(as []*pawlv1.Assignment) desired {
	var d desired
	for _, a := range as {
		if a.GetShadow() {
			d.shadow = a
		} else {
			d.run = a
		}
	}
	return d
}
