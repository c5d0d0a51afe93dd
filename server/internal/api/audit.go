package api

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/audit"
)

// Audit implements pawl.v1.AuditService over an audit log.
type Audit struct {
	log    audit.Log
	logger *slog.Logger
}

var _ pawlv1connect.AuditServiceHandler = (*Audit)(nil)

// NewAudit returns the AuditService handler of log.
func NewAudit(log audit.Log, logger *slog.Logger) *Audit { return &Audit{log: log, logger: logger} }

// ListAudit implements pawl.v1.AuditService.ListAudit.
func (h *Audit) ListAudit(ctx context.Context, req *connect.Request[pawlv1.ListAuditRequest]) (*connect.Response[pawlv1.ListAuditResponse], error) {
	m := req.Msg
	limit, err := PageSize(m.GetPageSize())
	if err != nil {
		return nil, err
	}
	q := audit.Query{Principal: m.GetPrincipal(), ConfigID: m.GetConfigId(), Outcome: m.GetOutcome(), Limit: limit}
	if err := checkOutcome(q.Outcome); err != nil {
		return nil, err
	}
	if m.Since != nil {
		q.Since = m.GetSince().AsTime()
	}
	if m.Until != nil {
		q.Until = m.GetUntil().AsTime()
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return nil, InvalidArgument("until (%s) is before since (%s)", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	if t := m.GetPageToken(); t != "" {
		if q.After, err = audit.DecodeCursor(t); err != nil {
			return nil, InvalidArgument("page_token is not a token from ListAudit")
		}
	}
	records, next, done, err := audit.List(ctx, h.log, q)
	if errors.Is(err, audit.ErrCursor) {
		return nil, InvalidArgument("page_token does not point into this audit log")
	}
	if err != nil {
		return nil, Error(h.logger, req.Spec(), err)
	}
	out := &pawlv1.ListAuditResponse{}
	for _, s := range records {
		out.Records = append(out.Records, &pawlv1.AuditRecord{Position: s.Position, Canonical: s.Canonical, Hash: s.Hash})
	}
	if !done {
		out.NextPageToken = next.Encode()
	}
	return connect.NewResponse(out), nil
}

// checkOutcome accepts the outcomes a ListAudit may filter on.
func checkOutcome(o string) error {
	switch o {
	case "", "ok", audit.OutcomeFailed, audit.OutcomeRefused:
		return nil
	}
	var c connect.Code
	if err := c.UnmarshalText([]byte(o)); err != nil {
		return InvalidArgument("outcome %q: want ok, failed, refused or a Connect code such as permission_denied", o)
	}
	return nil
}
