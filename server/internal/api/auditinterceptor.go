package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/sdk/auditchain"
	"github.com/pawlcfg/pawl/server/internal/audit"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// RequestIDHeader is the response header that carries a call's request ID,
// the request_id of its audit record.
const RequestIDHeader = "Pawl-Request-Id"

// PrincipalFunc says who makes the call ctx belongs to: the authenticated
// principal, and whom it says it acts for.
type PrincipalFunc func(ctx context.Context) (principal, onBehalfOf string)

// mutations are the procedures every call of which is recorded; any other
// is recorded only when it is refused. Heartbeat is left out: it only
// extends a lease, many times a minute per instance. Snapshot, a read, is
// in: it copies the whole store out.
var mutations = map[string]bool{
	pawlv1connect.KVServicePutProcedure:                true,
	pawlv1connect.KVServiceDeleteProcedure:             true,
	pawlv1connect.KVServiceTxnProcedure:                true,
	pawlv1connect.ValidatorServiceUploadProcedure:      true,
	pawlv1connect.ReleaseServiceCreateReleaseProcedure: true,
	pawlv1connect.ReleaseServiceRetireMemberProcedure:  true,
	pawlv1connect.ReleaseServiceRevokeReleaseProcedure: true,
	pawlv1connect.RolloutServicePromoteProcedure:       true,
	pawlv1connect.RolloutServiceRollbackProcedure:      true,
	pawlv1connect.RolloutServiceStopRolloutProcedure:   true,
	// A lookup that fences its idempotency key for good: no move may use
	// that key after it.
	pawlv1connect.RolloutServiceGetPromotionProcedure: true,
	pawlv1connect.RolloutServiceAckProcedure:          true,
	pawlv1connect.InstanceServiceRegisterProcedure:    true,
	pawlv1connect.MaintenanceServiceSnapshotProcedure: true,
}

// auditAppendTimeout bounds how long a call waits for its record to be
// durable, however soon its caller gives up: the record of a change made
// is written even when nobody waits for the answer.
const auditAppendTimeout = 15 * time.Second

// AuditInterceptor gives every call, unary or streaming, a request ID (in
// its context, audit.CallFrom, and in the Pawl-Request-Id response header)
// and records in log every mutation and every call refused as
// Unauthenticated or PermissionDenied, once it ended, before it is
// answered. principal says who calls; now is the records' clock.
//
// A call is recorded once, with its outcome, after it ran: a record
// written before the call as well would double the writes on the ACK
// path, and a record of the outcome is needed anyway. When the record
// cannot be written the answer says "unaudited": a call that succeeded
// fails with Unavailable (its change was made, and no record says who made
// it); a call that failed keeps its code, with the note in its message.
// Put it inside the log interceptor, which then logs these failures too,
// and outside anything that refuses calls, so that it sees the refusals.
func AuditInterceptor(log audit.Log, principal PrincipalFunc, now func() time.Time, logger *slog.Logger) connect.Interceptor {
	return &auditor{log: log, principal: principal, now: now, logger: logger}
}

type auditor struct {
	log       audit.Log
	principal PrincipalFunc
	now       func() time.Time
	logger    *slog.Logger
}

// begin names the call and puts it in ctx.
func (a *auditor) begin(ctx context.Context, traceparent string) (context.Context, audit.Call) {
	call := audit.Call{RequestID: audit.NewRequestID()}
	call.TraceID, _ = rollout.TraceID(traceparent) // a malformed header names no trace
	call.Principal, call.OnBehalfOf = a.principal(ctx)
	return audit.WithCall(ctx, call), call
}

func (a *auditor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, call := a.begin(ctx, req.Header().Get("traceparent"))
		if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
			info.ResponseHeader().Set(RequestIDHeader, call.RequestID) // sent with an error too
		}
		resp, err := next(ctx, req)
		var msg any
		if resp != nil {
			msg = resp.Any()
		}
		if err := a.record(ctx, call, req.Spec().Procedure, req.Any(), msg, err); err != nil {
			return nil, err
		}
		return resp, nil
	}
}

func (a *auditor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, call := a.begin(context.WithValue(ctx, streamConnKey{}, conn), conn.RequestHeader().Get("traceparent"))
		conn.ResponseHeader().Set(RequestIDHeader, call.RequestID)
		rc := &requestRecorder{StreamingHandlerConn: conn}
		// A session's registration and ACKs are recorded one by one, each
		// with a request ID of its own, by its handler (messageguard.go).
		ctx = withMessageRecorder(ctx, func(ctx context.Context, procedure string, req any) finishRecord {
			call := call
			call.RequestID = audit.NewRequestID()
			if ack, ok := req.(*pawlv1.AckRequest); ok {
				call.TraceID, _ = rollout.TraceID(ack.GetAck().GetTraceparent())
			}
			return a.prepare(audit.WithCall(ctx, call), call, procedure, req)
		})
		err := next(ctx, rc)
		return a.record(ctx, call, conn.Spec().Procedure, rc.first, nil, err)
	}
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (a *auditor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// requestRecorder keeps the first message a stream received: the request
// of a server stream, whose subject a refusal records.
type requestRecorder struct {
	connect.StreamingHandlerConn
	first any
}

func (r *requestRecorder) Receive(m any) error {
	err := r.StreamingHandlerConn.Receive(m)
	if err == nil && r.first == nil {
		r.first = m
	}
	return err
}

// record writes the call's record if it is one to keep, and returns the
// call's error, or the error saying it went unaudited.
func (a *auditor) record(ctx context.Context, call audit.Call, procedure string, req, resp any, err error) error {
	if !keeps(procedure, err) {
		return err
	}
	// Authentication ran inside this interceptor, after begin: who the
	// call was is known now.
	call.Principal, call.OnBehalfOf = a.principal(ctx)
	s := requestSubject(req)
	addResponseSubject(&s, resp)
	rec := a.entry(call, procedure, s, err)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditAppendTimeout)
	defer cancel()
	_, aerr := a.log.Append(actx, rec)
	return a.outcome(call, rec, err, aerr)
}

// prepare reads now what the record of a request carried by a stream
// needs of ctx and of the request (who, what about), on the stream's
// goroutine, and returns the function that records it with its outcome
// without waiting (see finishRecord), which can then run on whatever
// goroutine learns the outcome and does little there.
func (a *auditor) prepare(ctx context.Context, call audit.Call, procedure string, req any) finishRecord {
	call.Principal, call.OnBehalfOf = a.principal(ctx) // the stream's, authenticated
	subject := requestSubject(req)
	actx := context.WithoutCancel(ctx)
	return func(resp any, err error, done func(error)) {
		if !keeps(procedure, err) {
			done(err)
			return
		}
		s := subject
		addResponseSubject(&s, resp)
		rec := a.entry(call, procedure, s, err)
		actx, cancel := context.WithTimeout(actx, auditAppendTimeout)
		a.log.AppendAsync(actx, rec, func(_ auditchain.Record, aerr error) {
			cancel()
			done(a.outcome(call, rec, err, aerr))
		})
	}
}

// keeps says whether a call to procedure that ended with err is recorded:
// every mutation, and every refusal.
func keeps(procedure string, err error) bool {
	code := connect.CodeOf(err)
	return mutations[procedure] || (err != nil && (code == connect.CodeUnauthenticated || code == connect.CodePermissionDenied))
}

// entry returns the record of a call (its principal known) about
// subject that ended with err, made now.
func (a *auditor) entry(call audit.Call, procedure string, subject auditchain.Subject, err error) auditchain.Record {
	rec := auditchain.Record{
		Time: auditchain.FormatTime(a.now()), Principal: call.Principal, OnBehalfOf: call.OnBehalfOf, Procedure: procedure,
		RequestID: call.RequestID, TraceID: call.TraceID, Outcome: auditchain.OutcomeOK, Subject: subject,
	}
	if err != nil {
		rec.Outcome, rec.Message = connect.CodeOf(err).String(), truncate(errorMessage(err), auditchain.MaxMessageBytes)
	}
	return rec
}

// outcome returns the error of a call whose record rec the audit log
// appended (aerr nil) or not: the call's own, or one saying it went
// unaudited.
func (a *auditor) outcome(call audit.Call, rec auditchain.Record, err, aerr error) error {
	if aerr == nil {
		return err
	}
	a.logger.Error("a call went unaudited", "procedure", rec.Procedure, "request_id", call.RequestID, "principal", call.Principal,
		"outcome", rec.Outcome, "error", aerr)
	if err == nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("unaudited: the request succeeded (its change was made, request ID %s), "+
			"but its audit record could not be written: %v", call.RequestID, aerr))
	}
	return connect.NewError(connect.CodeOf(err), fmt.Errorf("%s (unaudited: its audit record could not be written: %v)", errorMessage(err), aerr))
}

func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// requestSubject reads what a call was about from its request: the
// fields that name a config, generation, key, prefix, digest or
// identity. addResponseSubject adds what its answer names.
func requestSubject(req any) auditchain.Subject {
	var s auditchain.Subject
	fillSubject(&s, req)
	switch m := req.(type) {
	case *pawlv1.AckRequest:
		fillSubject(&s, m.GetAck())
	case *pawlv1.RegisterRequest:
		fillSubject(&s, m.GetInstance())
	case *pawlv1.SessionRequest:
		fillSubject(&s, m.GetHello().GetInstance())
	case *pawlv1.CreateReleaseRequest:
		fillSubject(&s, m.GetSpec())
	case *pawlv1.TxnRequest:
		keys := make([]string, 0, len(m.GetOps()))
		for _, op := range m.GetOps() {
			keys = append(keys, op.GetKey())
		}
		s.Prefix = commonPrefix(keys)
	}
	return s
}

// addResponseSubject adds to s what a call's answer names that its
// request did not: a digest, generation or revision it made.
func addResponseSubject(s *auditchain.Subject, resp any) {
	switch m := resp.(type) {
	case *pawlv1.UploadResponse:
		s.Digest = m.GetValidator().GetDigest()
	case *pawlv1.CreateReleaseResponse:
		s.Generation, s.Digest = m.GetRelease().GetGeneration(), m.GetRelease().GetContentDigest()
	case *pawlv1.PromoteResponse:
		s.Generation = m.GetReceipt().GetToGeneration()
	case *pawlv1.RollbackResponse:
		s.Generation = m.GetReceipt().GetToGeneration()
	case interface{ GetRevision() int64 }: // the KV mutations
		s.Revision = m.GetRevision()
	}
}

// fillSubject sets the fields of s that m names and s does not have yet.
func fillSubject(s *auditchain.Subject, m any) {
	str := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	if v, ok := m.(interface{ GetConfigId() string }); ok {
		str(&s.ConfigID, v.GetConfigId())
	}
	if v, ok := m.(interface{ GetGeneration() int64 }); ok && s.Generation == 0 {
		s.Generation = v.GetGeneration()
	}
	if v, ok := m.(interface{ GetKey() string }); ok {
		str(&s.Key, v.GetKey())
	}
	if v, ok := m.(interface{ GetPrefix() string }); ok {
		str(&s.Prefix, v.GetPrefix())
	}
	if v, ok := m.(interface{ GetDigest() string }); ok {
		str(&s.Digest, v.GetDigest())
	}
	if v, ok := m.(interface{ GetContentDigest() string }); ok {
		str(&s.Digest, v.GetContentDigest())
	}
	if v, ok := m.(interface{ GetWorkloadIdentity() string }); ok {
		str(&s.Identity, v.GetWorkloadIdentity())
	}
}

// commonPrefix returns the longest prefix every key shares.
func commonPrefix(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	p := keys[0]
	for _, k := range keys[1:] {
		for !strings.HasPrefix(k, p) {
			p = p[:len(p)-1]
		}
	}
	return strings.ToValidUTF8(p, "")
}
