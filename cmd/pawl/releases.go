package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

func (g *globals) releases() pawlv1connect.ReleaseServiceClient {
	client, opts := g.transport()
	return pawlv1connect.NewReleaseServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
}

func (g *globals) instances() pawlv1connect.InstanceServiceClient {
	client, opts := g.transport()
	return pawlv1connect.NewInstanceServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
}

var policyKinds = map[string]pawlv1.AckPolicyKind{
	"all":            pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL,
	"fraction":       pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION,
	"zone-quorum":    pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM,
	"critical-role":  pawlv1.AckPolicyKind_ACK_POLICY_KIND_CRITICAL_ROLE,
	"traffic-weight": pawlv1.AckPolicyKind_ACK_POLICY_KIND_TRAFFIC_WEIGHT,
}

// parseStage reads NAME[@K=V,...]:KIND[=VALUE][:OPTION...], e.g.
// canary:fraction=0.05, zone-a@zone=zone-a:all,
// zones:zone-quorum=0.5:max-rejected=2, primaries:critical-role=primary,
// mirror@zone=zone-a:all:shadow, canary:all:max-error-rate=0.01:max-p99=250ms.
func parseStage(s string) (*pawlv1.Stage, error) {
	const usage = "NAME[@K=V,...]:KIND[=VALUE][:max-rejected=N][:shadow][:max-error-rate=F][:max-p99=DURATION]"
	parts := strings.Split(s, ":")
	if len(parts) < 2 || parts[0] == "" {
		return nil, fmt.Errorf("--stage %q: want %s", s, usage)
	}
	name, sel, hasSel := strings.Cut(parts[0], "@")
	if name == "" {
		return nil, fmt.Errorf("--stage %q: the stage needs a name before @", s)
	}
	var selector map[string]string
	if hasSel {
		selector = map[string]string{}
		for _, kv := range strings.Split(sel, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--stage %q: the selector after @ is K=V[,K=V...], e.g. canary@zone=zone-a", s)
			}
			selector[k] = v
		}
	}
	kindName, value, _ := strings.Cut(parts[1], "=")
	kind, ok := policyKinds[kindName]
	if !ok {
		return nil, fmt.Errorf("--stage %q: kind %q is not one of all, fraction, zone-quorum, critical-role, traffic-weight", s, kindName)
	}
	policy := &pawlv1.AckPolicy{Kind: kind}
	switch {
	case kindName == "critical-role":
		policy.Role = value
	case kindName != "all":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("--stage %q: %s needs a fraction, e.g. %s=0.5", s, kindName, kindName)
		}
		policy.Fraction = f
	}
	stage := &pawlv1.Stage{Name: name, Selector: selector, Policy: policy}
	for _, opt := range parts[2:] {
		key, val, _ := strings.Cut(opt, "=")
		var err error
		switch key {
		case "max-rejected":
			var n int
			n, err = strconv.Atoi(val)
			policy.MaxRejected = int32(n)
		case "shadow":
			stage.Shadow = val == ""
			if val != "" {
				err = errors.New("shadow takes no value")
			}
		case "max-error-rate":
			var f float64
			f, err = strconv.ParseFloat(val, 64)
			budget(stage).MaxErrorRate = &f
		case "max-p99":
			var d time.Duration
			d, err = time.ParseDuration(val)
			budget(stage).MaxP99Latency = durationpb.New(d)
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return nil, fmt.Errorf("--stage %q: option %q: %v; want %s", s, opt, err, usage)
		}
	}
	return stage, nil
}

// budget returns the stage's health budget, creating it.
func budget(st *pawlv1.Stage) *pawlv1.HealthBudget {
	if st.Budget == nil {
		st.Budget = &pawlv1.HealthBudget{}
	}
	return st.Budget
}

func releaseCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "release", Short: "Create and read releases"}
	var file, validator, mediaType, params, actor string
	var selector map[string]string
	var stages []string
	var healthWindow, deadline time.Duration
	var minCoverage float64
	var requireInstanceCredential bool
	create := &cobra.Command{
		Use:   "create CONFIG --file F --validator sha256:... --stage NAME:KIND[=V] ...",
		Short: "Validate content on the server and store it as the config's next generation",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" || validator == "" || len(stages) == 0 {
				return usageError{errors.New("give --file, --validator and at least one --stage")}
			}
			content, err := readValue(g.stdin, nil, file)
			if err != nil {
				return err
			}
			spec := &pawlv1.ReleaseSpec{
				ConfigId: args[0], Content: content, MediaType: mediaType, ValidatorDigest: validator,
				Selector: selector, HealthWindow: durationpb.New(healthWindow), Deadline: durationpb.New(deadline),
				RequireInstanceCredential: requireInstanceCredential,
			}
			if cmd.Flags().Changed("min-coverage") {
				spec.MinCoverage = &minCoverage
			}
			if params != "" {
				if spec.ValidatorParams, err = os.ReadFile(params); err != nil {
					return fmt.Errorf("read params: %w", err)
				}
			}
			for _, s := range stages {
				st, err := parseStage(s)
				if err != nil {
					return usageError{err}
				}
				spec.Stages = append(spec.Stages, st)
			}
			req := connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec})
			setActor(req, actor)
			done := g.slowNotice(fmt.Sprintf("creating release of %s (%d bytes): validating it and freezing the membership", args[0], len(content)))
			resp, err := g.releases().CreateRelease(cmd.Context(), req)
			done()
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(resp.Msg)
			}
			r := resp.Msg.GetRelease()
			_, err = fmt.Fprintf(g.stdout, "%s generation %d %s members=%d\n", r.GetSpec().GetConfigId(), r.GetGeneration(), r.GetContentDigest(), len(r.GetMembership()))
			return err
		},
	}
	create.Flags().StringVarP(&file, "file", "f", "", "the config content (- for standard input)")
	create.Flags().StringVar(&validator, "validator", "", "digest of the validator that must pass it")
	create.Flags().StringVar(&mediaType, "media-type", "application/json", "the content's media type")
	create.Flags().StringVar(&params, "params", "", "a JSON file of validator parameters")
	create.Flags().StringToStringVar(&selector, "selector", nil, "labels the target instances must have (k=v,...)")
	create.Flags().StringArrayVar(&stages, "stage", nil, "a stage NAME[@K=V,...]:KIND[=VALUE][:max-rejected=N][:shadow][:max-error-rate=F][:max-p99=D], in order; repeat (K may be zone or role)")
	create.Flags().DurationVar(&healthWindow, "health-window", time.Minute, "how long an instance must stay healthy before its ACK counts")
	create.Flags().DurationVar(&deadline, "deadline", time.Hour, "how long the rollout may take")
	create.Flags().Float64Var(&minCoverage, "min-coverage", 1, "the share of members, 0 to 1, that must have reported what they run before promote")
	create.Flags().BoolVar(&requireInstanceCredential, "require-instance-credential", false, "freeze and count only instances registered with an instance credential (a token or certificate whose grant names their identity)")
	create.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is releasing (env PAWL_ACTOR)")

	ls := &cobra.Command{
		Use:   "ls CONFIG",
		Short: "List a config's releases: GENERATION<TAB>STATE<TAB>CONTENT_DIGEST<TAB>MEMBERS<TAB>CREATED<TAB>BY (-o json: one release per line, without membership and content)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			token := ""
			for {
				resp, err := g.releases().ListReleases(cmd.Context(), connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: args[0], PageToken: token, PageSize: 1000}))
				if err != nil {
					return err
				}
				for _, r := range resp.Msg.GetReleases() {
					if g.output == "json" {
						if err := g.printJSON(r); err != nil {
							return err
						}
						continue
					}
					if _, err := fmt.Fprintf(g.stdout, "%d\t%s\t%s\t%d\t%s\t%s\n", r.GetGeneration(), strings.TrimPrefix(r.GetState().String(), "RELEASE_STATE_"),
						r.GetContentDigest(), r.GetMemberCount(), r.GetCreatedAt().AsTime().Format(time.RFC3339), r.GetCreatedBy()); err != nil {
						return err
					}
				}
				if token = resp.Msg.GetNextPageToken(); token == "" {
					return nil
				}
			}
		},
	}
	show := &cobra.Command{
		Use:   "show CONFIG GENERATION",
		Short: "Print one release as JSON",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil {
				return usageError{fmt.Errorf("generation %q is not a number", args[1])}
			}
			resp, err := g.releases().GetRelease(cmd.Context(), connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: args[0], Generation: gen}))
			if err != nil {
				return err
			}
			return g.printJSON(resp.Msg.GetRelease())
		},
	}
	cmd.AddCommand(create, ls, show, retireCommand(g), revokeCommand(g))
	return cmd
}

func retireCommand(g *globals) *cobra.Command {
	var reason, actor string
	cmd := &cobra.Command{
		Use:   "retire CONFIG GENERATION IDENTITY --reason TEXT",
		Short: "Retire an instance from a release's frozen membership (it stops counting toward any stage), with who and why",
		Args:  usageArgs(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := generationAndReason(args[1], reason, "retirement")
			if err != nil {
				return err
			}
			req := connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: args[0], Generation: gen, WorkloadIdentity: args[2], Reason: reason})
			setActor(req, actor)
			resp, err := g.releases().RetireMember(cmd.Context(), req)
			if err != nil {
				return err
			}
			rt := resp.Msg.GetRetirement()
			if g.output == "json" {
				return g.printJSON(rt)
			}
			_, err = fmt.Fprintf(g.stdout, "%s retired from %s generation %d by %s: %s\n", rt.GetWorkloadIdentity(), rt.GetConfigId(), rt.GetGeneration(), rt.GetActor(), rt.GetReason())
			return err
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept in the record)")
	cmd.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is retiring it (env PAWL_ACTOR)")
	return cmd
}

func revokeCommand(g *globals) *cobra.Command {
	var reason, actor string
	cmd := &cobra.Command{
		Use:   "revoke CONFIG GENERATION --reason TEXT",
		Short: "Revoke a generation: it can never be promoted (a candidate's rollout stops); the active one cannot be revoked, roll back first",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			gen, err := generationAndReason(args[1], reason, "revocation")
			if err != nil {
				return err
			}
			req := connect.NewRequest(&pawlv1.RevokeReleaseRequest{ConfigId: args[0], Generation: gen, Reason: reason})
			setActor(req, actor)
			resp, err := g.releases().RevokeRelease(cmd.Context(), req)
			if err != nil {
				return err
			}
			rv := resp.Msg.GetRevocation()
			if g.output == "json" {
				return g.printJSON(rv)
			}
			_, err = fmt.Fprintf(g.stdout, "%s generation %d revoked by %s: %s\n", rv.GetConfigId(), rv.GetGeneration(), rv.GetActor(), rv.GetReason())
			return err
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept in the record)")
	cmd.Flags().StringVar(&actor, "actor", os.Getenv("PAWL_ACTOR"), "who is revoking it (env PAWL_ACTOR)")
	return cmd
}

func instancesCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "instances",
		Short: "List registered instances: IDENTITY<TAB>ZONE<TAB>ROLE<TAB>APP_VERSION<TAB>live|expired<TAB>BOOT",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := g.instances().ListInstances(cmd.Context(), connect.NewRequest(&pawlv1.ListInstancesRequest{}))
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(resp.Msg)
			}
			for _, r := range resp.Msg.GetInstances() {
				in := r.GetInstance()
				state := "expired"
				if r.GetLive() {
					state = "live"
				}
				if _, err := fmt.Fprintf(g.stdout, "%s\t%s\t%s\t%s\t%s\t%s\n", in.GetWorkloadIdentity(), in.GetZone(), in.GetRole(), in.GetAppVersion(), state, in.GetBootId()); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// generationAndReason reads a command's generation argument and checks its
// --reason, which goes into the record named: a usage error for either.
func generationAndReason(arg, reason, record string) (int64, error) {
	gen, err := strconv.ParseInt(arg, 10, 64)
	if err != nil {
		return 0, usageError{fmt.Errorf("generation %q is not a number", arg)}
	}
	if reason == "" {
		return 0, usageError{fmt.Errorf("--reason is required: it goes into the %s record", record)}
	}
	return gen, nil
}
