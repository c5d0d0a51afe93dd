package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk/auditchain"
)

func (g *globals) auditClient() pawlv1connect.AuditServiceClient {
	client, opts := g.transport()
	return pawlv1connect.NewAuditServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
}

func auditCommand(g *globals) *cobra.Command {
	var principal, config, since, until, outcome string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List the audit log: every mutation and every refused request, with who, when and how it ended",
		Long: `List the audit log's records, oldest first, one line each:
SEQUENCE TIME PRINCIPAL PROCEDURE OUTCOME REQUEST_ID SUBJECT (-o json: one object per
line with the position, the hash and the record). --since and --until take an RFC 3339
time or a duration before now (90m); --outcome takes ok, failed, refused or a Connect
code (permission_denied). "pawl audit verify" checks the chain.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &pawlv1.ListAuditRequest{Principal: principal, ConfigId: config, Outcome: outcome}
			var err error
			if req.Since, err = timeFlag("since", since); err != nil {
				return err
			}
			if req.Until, err = timeFlag("until", until); err != nil {
				return err
			}
			return g.eachAuditRecord(cmd.Context(), req, g.printAuditRecord)
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", "only records of this principal")
	cmd.Flags().StringVar(&config, "config", "", "only records about this config")
	cmd.Flags().StringVar(&since, "since", "", "only records at or after this time (RFC 3339, or a duration before now)")
	cmd.Flags().StringVar(&until, "until", "", "only records at or before this time (RFC 3339, or a duration before now)")
	cmd.Flags().StringVar(&outcome, "outcome", "", "only records with this outcome: ok, failed, refused or a Connect code")
	cmd.AddCommand(auditVerifyCommand(g))
	return cmd
}

func auditVerifyCommand(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chain, from the server or (--file) the embedded store's audit.log",
		Long: `Fetch every record of the audit log and check its chain: each record's bytes hash to
the hash beside them, name the hash of the record before, and carry the next sequence.
A record changed, removed, inserted or moved fails the check, which names the first
bad record and exits 1. --file checks the file of the embedded store (DATA-DIR/audit.log)
without a server. Records removed from the end leave a valid, shorter chain: compare
the head printed with one printed before.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var chain auditchain.Chain
			check := func(s auditchain.Stored) error {
				if err := chain.Next(s); err != nil {
					return fmt.Errorf("audit: %w", err)
				}
				return nil
			}
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := auditchain.Scan(f, check); err != nil {
					return err
				}
			} else if err := g.eachAuditRecord(cmd.Context(), &pawlv1.ListAuditRequest{PageSize: 1000}, check); err != nil {
				return err
			}
			if g.output == "json" {
				return json.NewEncoder(g.stdout).Encode(map[string]any{"valid": true, "records": chain.Sequence, "head": chain.Hash})
			}
			_, err := fmt.Fprintf(g.stdout, "valid: %d records, head %s\n", chain.Sequence, chain.Hash)
			return err
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "check this audit log file instead of asking the server")
	return cmd
}

// eachAuditRecord lists the records req selects, every page, and calls fn
// with each.
func (g *globals) eachAuditRecord(ctx context.Context, req *pawlv1.ListAuditRequest, fn func(auditchain.Stored) error) error {
	client := g.auditClient()
	for {
		resp, err := client.ListAudit(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		for _, r := range resp.Msg.GetRecords() {
			if err := fn(auditchain.Stored{Position: r.GetPosition(), Hash: r.GetHash(), Canonical: r.GetCanonical()}); err != nil {
				return err
			}
		}
		if req.PageToken = resp.Msg.GetNextPageToken(); req.PageToken == "" {
			return nil
		}
	}
}

func (g *globals) printAuditRecord(s auditchain.Stored) error {
	r, derr := auditchain.Decode(s.Canonical)
	if g.output == "json" {
		out := map[string]any{"position": s.Position, "hash": s.Hash}
		if derr == nil {
			out["record"] = r
		} else {
			out["unreadable"] = string(s.Canonical)
		}
		return json.NewEncoder(g.stdout).Encode(out)
	}
	if derr != nil {
		_, err := fmt.Fprintf(g.stdout, "position %d: unreadable record: %v\n", s.Position, derr)
		return err
	}
	outcome := r.Outcome
	if r.Message != "" {
		outcome += " (" + r.Message + ")"
	}
	principal := r.Principal
	if r.OnBehalfOf != "" {
		principal += " for " + r.OnBehalfOf
	}
	_, err := fmt.Fprintf(g.stdout, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Sequence, r.Time, principal, r.Procedure, outcome, r.RequestID, subjectText(r.Subject))
	return err
}

// subjectText writes a subject as its fields that are set, KEY=VALUE.
func subjectText(s auditchain.Subject) string {
	var parts []string
	add := func(k, v string) {
		if v != "" && v != "0" {
			parts = append(parts, k+"="+v)
		}
	}
	add("config", s.ConfigID)
	add("generation", fmt.Sprint(s.Generation))
	add("key", s.Key)
	add("prefix", s.Prefix)
	add("digest", s.Digest)
	add("identity", s.Identity)
	add("revision", fmt.Sprint(s.Revision))
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// timeFlag reads --since or --until: an RFC 3339 time, or a duration
// before now.
func timeFlag(name, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return timestamppb.New(t), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return nil, usageError{fmt.Errorf("--%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration before now (90m)", name, v)}
	}
	return timestamppb.New(time.Now().Add(-d)), nil
}
