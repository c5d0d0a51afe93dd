package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

func (g *globals) rollouts() pawlv1connect.RolloutServiceClient {
	client, opts := g.transport()
	return pawlv1connect.NewRolloutServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
}

func newIdempotencyKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "cli-" + hex.EncodeToString(b)
}

// moveFunc sends one Promote or Rollback and returns its receipt.
type moveFunc func(ctx context.Context, ptr *pawlv1.Pointer, key string) (*pawlv1.Receipt, error)

// move reads the pointer, sends the move, and when the response is lost
// (the call failed without an answer from the server) resolves it with
// GetPromotion: a receipt under the key means the move happened.
//
// confirmGen > 0 (promote --wait) waits until the move is known: when the
// receipt lookup has no answer either, it keeps asking, and a pointer that
// shows confirmGen also proves the move.
func (g *globals) move(ctx context.Context, config, key string, confirmGen int64, send moveFunc) error {
	rs := g.rollouts()
	ptrResp, err := rs.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: config}))
	if err != nil {
		return err
	}
	if key == "" {
		key = newIdempotencyKey()
	}
	rc, err := send(ctx, ptrResp.Msg.GetPointer(), key)
	if err != nil && isLostResponse(err) {
		fmt.Fprintf(g.stderr, "pawl: PROMOTION_UNKNOWN: no answer (%v); looking up the receipt under key %s\n", err, key)
		got, gerr := rs.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: config, IdempotencyKey: key}))
		switch {
		case gerr == nil:
			fmt.Fprintf(g.stderr, "pawl: the receipt exists: the move happened\n")
			rc, err = got.Msg.GetReceipt(), nil
		case connect.CodeOf(gerr) == connect.CodeNotFound:
			return fmt.Errorf("%w; the move did not happen (no receipt under key %s, and the lookup fenced the key so that it never will): "+
				"run the command again, with a new --key or none", err, key)
		case confirmGen > 0:
			if rc, err = g.confirmMove(ctx, config, key, confirmGen); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w; whether it happened is unknown: run pawl promotion %s %s", err, config, key)
		}
	}
	if err != nil {
		return err
	}
	return g.printReceipt(config, rc)
}

// printReceipt prints a receipt: in text, "CONFIG promoted: generation
// FROM -> TO, epoch E, receipt KEY by ACTOR" (or "rolled back").
func (g *globals) printReceipt(config string, rc *pawlv1.Receipt) error {
	if g.output == "json" {
		return g.printJSON(rc)
	}
	kind := "promoted"
	if rc.GetRollback() {
		kind = "rolled back"
	}
	_, err := fmt.Fprintf(g.stdout, "%s %s: generation %d -> %d, epoch %d, receipt %s by %s\n", config, kind,
		rc.GetFromGeneration(), rc.GetToGeneration(), rc.GetEpoch(), rc.GetIdempotencyKey(), rc.GetActor())
	return err
}

// confirmMove asks, every DefaultInterval until ctx ends, for the receipt
// under key or a pointer that shows gen, after a promote whose answer was
// lost: either proves the move; no receipt under the key proves it did not
// happen.
func (g *globals) confirmMove(ctx context.Context, config, key string, gen int64) (*pawlv1.Receipt, error) {
	rs := g.rollouts()
	for {
		got, err := rs.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: config, IdempotencyKey: key}))
		switch {
		case err == nil:
			g.notef("the receipt exists: the move happened")
			return got.Msg.GetReceipt(), nil
		case connect.CodeOf(err) == connect.CodeNotFound:
			return nil, fmt.Errorf("the promotion did not happen (no receipt under key %s): run the command again", key)
		}
		if ptr, perr := rs.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: config})); perr == nil && ptr.Msg.GetPointer().GetGeneration() == gen {
			g.notef("the pointer shows generation %d: the move happened", gen)
			p := ptr.Msg.GetPointer()
			return &pawlv1.Receipt{ConfigId: config, ToGeneration: gen, Epoch: p.GetEpoch(), IdempotencyKey: key}, nil
		}
		g.notef("no answer yet about receipt %s (%v); asking again in %s", key, err, DefaultInterval)
		t := time.NewTimer(DefaultInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("whether the promotion happened is unknown: run pawl promotion %s %s", config, key)
		case <-t.C:
		}
	}
}

// isLostResponse reports a failure with no answer from the server, after
// which the request may or may not have been carried out: the server's own
// PROMOTION_UNKNOWN (code Unknown), or a transport failure.
func isLostResponse(err error) bool {
	code := connect.CodeOf(err)
	return code == connect.CodeUnavailable || code == connect.CodeDeadlineExceeded || code == connect.CodeUnknown || code == connect.CodeCanceled
}

func promoteCommand(g *globals) *cobra.Command {
	var key, actor string
	var wait bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "promote CONFIG GENERATION",
		Short: "Move the config's active pointer to a release whose stages passed (compare-and-swap, with a receipt); --wait waits for them to pass",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil {
				return usageError{fmt.Errorf("generation %q is not a number", args[1])}
			}
			if interval <= 0 {
				return usageError{fmt.Errorf("--interval %s: must be positive", interval)}
			}
			confirm := int64(0)
			if wait {
				confirm = gen
				active, err := g.awaitPromotable(cmd.Context(), args[0], gen, interval)
				if err != nil {
					return err
				}
				if active {
					g.notef("%s generation %d is already the active generation", args[0], gen)
					return nil
				}
			}
			return g.move(cmd.Context(), args[0], key, confirm, func(ctx context.Context, ptr *pawlv1.Pointer, key string) (*pawlv1.Receipt, error) {
				req := connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: args[0], Generation: gen,
					ExpectedGeneration: ptr.GetGeneration(), ExpectedEpoch: ptr.GetEpoch(), IdempotencyKey: key})
				setActor(req, actor)
				resp, err := g.rollouts().Promote(ctx, req)
				if err != nil {
					return nil, err
				}
				return resp.Msg.GetReceipt(), nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "idempotency key (default: a new random one)")
	cmd.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is promoting (env PAWL_ACTOR)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every stage passed and coverage is met (saying on stderr what it waits on), then promote, and wait until the receipt or the pointer confirms the move; fails at once if the rollout stops")
	cmd.Flags().DurationVar(&interval, "interval", DefaultInterval, "with --wait, how often to read the rollout's status")
	return cmd
}

func rollbackCommand(g *globals) *cobra.Command {
	var key, actor string
	cmd := &cobra.Command{
		Use:   "rollback CONFIG",
		Short: "Move the active pointer back to the generation the active one replaced, as a new receipt (epoch + 1)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.move(cmd.Context(), args[0], key, 0, func(ctx context.Context, ptr *pawlv1.Pointer, key string) (*pawlv1.Receipt, error) {
				req := connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: args[0],
					ExpectedGeneration: ptr.GetGeneration(), ExpectedEpoch: ptr.GetEpoch(), IdempotencyKey: key})
				setActor(req, actor)
				resp, err := g.rollouts().Rollback(ctx, req)
				if err != nil {
					return nil, err
				}
				return resp.Msg.GetReceipt(), nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "idempotency key (default: a new random one)")
	cmd.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is rolling back (env PAWL_ACTOR)")
	return cmd
}

// setActor names the caller in the Pawl-Actor header, when known.
func setActor(req connect.AnyRequest, actor string) {
	if actor != "" {
		req.Header().Set("Pawl-Actor", actor)
	}
}

func promotionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "promotion CONFIG IDEMPOTENCY_KEY",
		Short: "Print the receipt written for an idempotency key (-o json: the whole receipt)",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.rollouts().GetPromotion(cmd.Context(), connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: args[0], IdempotencyKey: args[1]}))
			if err != nil {
				return err
			}
			return g.printReceipt(args[0], resp.Msg.GetReceipt())
		},
	}
}

func rolloutCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "rollout", Short: "Follow rollouts"}
	var gen int64
	var showAcks, watch bool
	var interval time.Duration
	status := &cobra.Command{
		Use:   "status CONFIG",
		Short: "Show each stage and zone of a release: healthy, rejected, waiting on what",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if gen == 0 {
				newest, err := g.releases().GetRelease(ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: args[0]}))
				if err != nil {
					return err
				}
				gen = newest.Msg.GetRelease().GetGeneration()
			}
			if watch {
				if interval <= 0 {
					return usageError{fmt.Errorf("--interval %s: must be positive", interval)}
				}
				if g.output == "json" || showAcks {
					return usageError{errors.New("--watch prints text progress: without -o json and --acks")}
				}
				return g.watchStatus(ctx, args[0], gen, interval)
			}
			// Every page of ACKs, gathered into one answer, only when they
			// are asked for: a release of 10,000 members has tens of
			// thousands, and the stages say what the rollout waits on.
			// Without --acks, one call: the first page.
			var st *pawlv1.GetRolloutStatusResponse
			for token := ""; ; {
				resp, err := g.rollouts().GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: args[0], Generation: gen,
					AckPageSize: 1000, AckPageToken: token}))
				if err != nil {
					return err
				}
				if st == nil {
					st = resp.Msg
				} else {
					st.Acks = append(st.Acks, resp.Msg.GetAcks()...)
				}
				if token = resp.Msg.GetNextAckPageToken(); token == "" || !showAcks {
					break
				}
			}
			if showAcks {
				st.NextAckPageToken = ""
			}
			if g.output == "json" {
				return g.printJSON(st)
			}
			return printStatus(g, args[0], gen, st, showAcks)
		},
	}
	status.Flags().Int64Var(&gen, "generation", 0, "the release (default: the latest)")
	status.Flags().BoolVar(&watch, "watch", false, "follow the rollout until it is done (every stage passed, or promoted) or stopped: "+
		"redrawn on a terminal, one line per change of state or stage progress otherwise; exit 1 if it stopped")
	status.Flags().DurationVar(&interval, "interval", DefaultInterval, "with --watch, how often to read the status")
	status.Flags().BoolVar(&showAcks, "acks", false, "fetch every page of ACKs and list each: instance, boot, state, apply sequence, whether it counts, and its trace ID (without it: the first page)")
	cmd.AddCommand(status, stopCommand(g), appliedCommand(g))
	return cmd
}

func appliedCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "applied CONFIG",
		Short: "What each instance last reported running: IDENTITY<TAB>GENERATION<TAB>CONTENT_DIGEST<TAB>MATCH<TAB>STATE<TAB>BOOT<TAB>current|previous<TAB>REPORTED<TAB>TRACE_ID",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			token := ""
			for {
				resp, err := g.rollouts().ListApplied(cmd.Context(), connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: args[0], PageToken: token, PageSize: 1000}))
				if err != nil {
					return err
				}
				for _, a := range resp.Msg.GetApplied() {
					if g.output == "json" {
						if err := g.printJSON(a); err != nil {
							return err
						}
						continue
					}
					match, boot := "mismatch", "previous"
					if a.GetMatchesRelease() {
						match = "match"
					}
					if a.GetCurrentBoot() {
						boot = "current"
					}
					trace := a.GetTraceId()
					if trace == "" {
						trace = "-"
					}
					if _, err := fmt.Fprintf(g.stdout, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.GetWorkloadIdentity(), a.GetGeneration(), a.GetContentDigest(), match,
						strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_"), a.GetBootId(), boot, a.GetReportedAt().AsTime().Format(time.RFC3339), trace); err != nil {
						return err
					}
				}
				if token = resp.Msg.GetNextPageToken(); token == "" {
					return nil
				}
			}
		},
	}
}

func stopCommand(g *globals) *cobra.Command {
	var reason, actor string
	cmd := &cobra.Command{
		Use:   "stop CONFIG GENERATION --reason TEXT",
		Short: "Stop a release's rollout: instances go back to the active generation, and it can no longer be promoted",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := generationAndReason(args[1], reason, "stop")
			if err != nil {
				return err
			}
			req := connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: args[0], Generation: gen, Reason: reason})
			setActor(req, actor)
			resp, err := g.rollouts().StopRollout(cmd.Context(), req)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(resp.Msg.GetStop())
			}
			_, err = fmt.Fprintf(g.stdout, "%s generation %d stopped by %s: %s\n", args[0], gen, resp.Msg.GetStop().GetActor(), resp.Msg.GetStop().GetReason())
			return err
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept in the stop record)")
	cmd.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is stopping it (env PAWL_ACTOR)")
	return cmd
}

func printStatus(g *globals, config string, gen int64, st *pawlv1.GetRolloutStatusResponse, showAcks bool) error {
	w := g.stdout
	fmt.Fprintf(w, "%s generation %d: %s (active: generation %d, epoch %d)\n", config, gen,
		strings.TrimPrefix(st.GetState().String(), "RELEASE_STATE_"), st.GetPointer().GetGeneration(), st.GetPointer().GetEpoch())
	if stop := st.GetStop(); stop != nil {
		by := ""
		switch {
		case stop.GetManual():
			by = " by " + stop.GetActor()
		case stop.GetStage() != "":
			by = " at stage " + stop.GetStage()
		}
		fmt.Fprintf(w, "stopped%s at %s: %s\n", by, stop.GetTime().AsTime().Format(time.RFC3339), stop.GetReason())
	}
	if c := st.GetCoverage(); c != nil {
		fmt.Fprintf(w, "coverage: %s\n", c.GetSummary())
	}
	for _, s := range st.GetStages() {
		var notes []string
		if s.GetShadow() {
			notes = append(notes, "shadow")
		}
		switch {
		case s.GetPassedAt() != nil:
			notes = append(notes, "passed at "+s.GetPassedAt().AsTime().Format(time.RFC3339))
		case s.GetReached():
			notes = append(notes, "reached")
		default:
			notes = append(notes, "not reached")
		}
		if s.GetRetired() > 0 {
			notes = append(notes, fmt.Sprintf("%d retired", s.GetRetired()))
		}
		fmt.Fprintf(w, "stage %s (%s): %s, %d/%d healthy, %d rejected: %s\n", s.GetName(), strings.Join(notes, ", "), s.GetOutcome(),
			s.GetHealthy(), s.GetMembers(), s.GetRejected(), s.GetReason())
		fmt.Fprintf(w, "  states: %s\n", stateCounts(s.GetStates()))
		zones := make([]string, 0, len(s.GetZones()))
		for z := range s.GetZones() {
			zones = append(zones, z)
		}
		sort.Strings(zones)
		for _, z := range zones {
			zs := s.GetZones()[z]
			fmt.Fprintf(w, "  zone %s: %d/%d healthy, %d rejected (%s)\n", z, zs.GetHealthy(), zs.GetMembers(), zs.GetRejected(), stateCounts(zs.GetStates()))
		}
	}
	if n := st.GetMembershipGeneration(); n > 1 {
		fmt.Fprintf(w, "membership generation %d: %d retired since the freeze\n", n, len(st.GetRetirements()))
	}
	for _, rt := range st.GetRetirements() {
		fmt.Fprintf(w, "retired %s by %s at %s: %s\n", rt.GetWorkloadIdentity(), rt.GetActor(), rt.GetTime().AsTime().Format(time.RFC3339), rt.GetReason())
	}
	for _, a := range st.GetAcks() {
		switch {
		case a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_REJECTED && a.GetCounted():
			printRejection(w, a)
		case a.GetBudgetBreach() != "" && a.GetCounted():
			fmt.Fprintf(w, "over budget: %s: %s\n", a.GetWorkloadIdentity(), a.GetBudgetBreach())
		case a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && !a.GetHealthOk() && a.GetCounted():
			fmt.Fprintf(w, "unhealthy: %s at apply sequence %d\n", a.GetWorkloadIdentity(), a.GetApplySequence())
		case !a.GetCounted():
			fmt.Fprintf(w, "not counted: %s %s: %s\n", a.GetWorkloadIdentity(), strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_"), a.GetNotCountedReason())
		}
	}
	if st.GetNextAckPageToken() != "" {
		fmt.Fprintf(w, "(the first %d ACKs; --acks fetches them all)\n", len(st.GetAcks()))
	}
	if showAcks {
		for _, a := range st.GetAcks() {
			counted := "counted"
			if !a.GetCounted() {
				counted = "not counted"
			}
			trace := a.GetTraceId()
			if trace == "" {
				trace = "-"
			}
			fmt.Fprintf(w, "ack %s boot %s %s seq %d %s trace %s at %s\n", a.GetWorkloadIdentity(), a.GetBootId(),
				strings.TrimPrefix(a.GetState().String(), "INSTANCE_STATE_"), a.GetApplySequence(), counted, trace,
				a.GetReceivedAt().AsTime().Format(time.RFC3339Nano))
		}
	}
	return nil
}

// printRejection prints a REJECTED ACK: the instance, the reject code
// when it sent one, and each violation on a line of its own (the reason,
// which flattens them, otherwise).
func printRejection(w io.Writer, a *pawlv1.Ack) {
	code := ""
	if c := a.GetRejectCode(); c != pawlv1.RejectCode_REJECT_CODE_UNSPECIFIED {
		code = " (" + strings.TrimPrefix(c.String(), "REJECT_CODE_") + ")"
	}
	vs := a.GetViolations()
	if len(vs) == 0 {
		fmt.Fprintf(w, "rejected by %s%s: %s\n", a.GetWorkloadIdentity(), code, a.GetReason())
		return
	}
	noun := "violations"
	if len(vs) == 1 {
		noun = "violation"
	}
	fmt.Fprintf(w, "rejected by %s%s: %d %s\n", a.GetWorkloadIdentity(), code, len(vs), noun)
	for _, v := range vs {
		fmt.Fprintln(w, violationLine(v))
	}
}

// stateCounts renders {"APPLIED": 2, "NO_ACK": 1} as "APPLIED=2 NO_ACK=1".
func stateCounts(m map[string]int32) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
