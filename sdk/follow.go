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

// follow registers the instance and follows its assignment stream until
// the client closes: the stream holds the instance's lease while it is
// open, resumes after the last revision seen when it reconnects (waiting
// with backoff and jitter), and takes a full set after a compaction. Each
// config's assignments go to its runner. Its exit is Close.
func (c *Client) follow() {
	defer c.wg.Done()
	runners := map[string]*runner{}
	defer func() {
		for _, r := range runners {
			r.stop()
		}
	}()
	set := map[string][]*pawlv1.Assignment{}
	var after int64
	b := c.newBackoff()
	for c.ctx.Err() == nil {
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
		err := c.watchAssignments(c.ctx, &after, set, runners, b)
		if c.ctx.Err() != nil {
			return
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
			after = 0
		}
		c.linkFailed("the assignment stream (resuming after revision "+strconv.FormatInt(after, 10)+")", err)
		b.wait(c.ctx)
	}
}

// register registers the instance with this boot and keeps the membership
// epoch the server returned.
func (c *Client) register(ctx context.Context) error {
	in := c.cfg.instance
	resp, err := c.instances.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: in.WorkloadIdentity, BootId: c.bootID, Zone: in.Zone, Role: in.Role,
		TrafficWeight: in.TrafficWeight, AppVersion: in.AppVersion, Labels: in.Labels,
	}}))
	if err != nil {
		return fmt.Errorf("sdk: register %s: %w", in.WorkloadIdentity, err)
	}
	epoch := resp.Msg.GetRecord().GetMembershipEpoch()
	if epoch <= 0 {
		return fmt.Errorf("sdk: register %s: the server returned no membership epoch", in.WorkloadIdentity)
	}
	c.epoch.Store(epoch)
	return nil
}

// watchAssignments runs one assignment stream until it fails, keeping
// set (each config's assignments) and after (the revision of the last
// message) current and offering each change to the config's runner.
func (c *Client) watchAssignments(ctx context.Context, after *int64, set map[string][]*pawlv1.Assignment, runners map[string]*runner, b *backoff) error {
	stream, err := c.instances.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{
		WorkloadIdentity: c.cfg.instance.WorkloadIdentity, BootId: c.bootID, Deltas: true, AfterRevision: *after,
	}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		b.reset()
		c.linkChanged(true, nil)
		c.linkWorks()
		msg := stream.Msg()
		if msg.GetRevision() < *after {
			continue // never go back to an older set
		}
		changed := map[string]bool{}
		if msg.GetFull() {
			for config := range set {
				changed[config] = true
			}
			clear(set)
		}
		for _, id := range msg.GetRemovedConfigIds() {
			delete(set, id)
			changed[id] = true
		}
		delta := map[string][]*pawlv1.Assignment{}
		for _, a := range msg.GetAssignments() {
			// A config ID becomes a file name in the cache and the
			// agent's directory: one the server could never have
			// accepted (a man in the middle of a plain http:// link)
			// is refused before any use.
			if err := errors.Join(configid.Check(a.GetConfigId()), configid.CheckGeneration(a.GetGeneration())); err != nil {
				c.cfg.log.Warn("pawl: refused an assignment the server cannot have sent", "server", c.Server(), "error", err)
				continue
			}
			delta[a.GetConfigId()] = append(delta[a.GetConfigId()], a)
		}
		for id, as := range delta {
			set[id] = as
			changed[id] = true
		}
		*after = msg.GetRevision()
		ids := make([]string, 0, len(changed))
		for id := range changed {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if c.cfg.configs != nil && !c.cfg.configs[id] {
				continue
			}
			r := runners[id]
			if r == nil {
				c.mu.Lock()
				c.assigned[id] = true
				c.mu.Unlock()
				r = c.startRunner(id)
				runners[id] = r
			}
			r.offer(desiredOf(set[id]))
		}
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
