package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk/textsafe"
	"github.com/pawlcfg/pawl/server/internal/auth"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// AuthInterceptor authenticates every call, unary or streaming, and
// authorizes it by RoleTable: deny by default. A call without a credential,
// or with one the auth file does not accept, fails with Unauthenticated; a
// principal without a permit for it fails with PermissionDenied, naming
// what it lacks, before anything is read, so that the refusal says nothing
// of keys or releases the caller may not see. List and Watch return only
// the keys the caller may read; ListInstances, GetRolloutStatus and
// ListApplied leave boot IDs and membership epochs out for non-admins.
//
// With a nil authenticator (no auth file) every caller is the anonymous
// principal, with every grant, and nothing is checked. The principal is on
// the context of every call (auth.PrincipalFrom).
func AuthInterceptor(authn *auth.Authenticator, registry *instance.Registry, rollouts *rollout.Rollouts, log *slog.Logger) connect.Interceptor {
	return &authInterceptor{authn: authn, registry: registry, rollouts: rollouts, log: log}
}

type authInterceptor struct {
	authn    *auth.Authenticator
	registry *instance.Registry
	rollouts *rollout.Rollouts
	log      *slog.Logger
}

func (a *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		p, err := a.authenticate(ctx, req.Header().Get("Authorization"), req.Header().Get(ActorHeader))
		if err != nil {
			return nil, err
		}
		ctx = auth.NewContext(ctx, p)
		if err := a.authorize(ctx, p, req.Spec().Procedure, req.Any()); err != nil {
			return nil, err
		}
		resp, err := next(ctx, req)
		if err == nil && !p.IsAdmin() {
			narrow(p, resp.Any())
		}
		return resp, err
	}
}

func (a *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		p, err := a.authenticate(ctx, conn.RequestHeader().Get("Authorization"), conn.RequestHeader().Get(ActorHeader))
		if err != nil {
			return err
		}
		ctx = auth.NewContext(ctx, p)
		// The requests a session carries after its hello are authorized
		// one by one by its handler, with this check (messageguard.go).
		ctx = withMessageCheck(ctx, func(ctx context.Context, procedure string, msg any) error {
			return a.authorize(ctx, p, procedure, msg)
		}, true)
		if p.IsAdmin() {
			return next(ctx, conn) // nothing to check or narrow
		}
		return next(ctx, &authConn{StreamingHandlerConn: conn, ctx: ctx, a: a, p: p})
	}
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (a *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// authConn authorizes a non-admin's stream on its request message (a
// server stream: one request, then responses; a session: its hello, the
// first message, while its handler authorizes each later request with
// checkMessage) and narrows what it sends.
type authConn struct {
	connect.StreamingHandlerConn
	ctx     context.Context
	a       *authInterceptor
	p       auth.Principal
	checked bool
}

func (c *authConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if !c.checked {
		c.checked = true
		if m, ok := msg.(*pawlv1.SessionRequest); ok && m.GetHello() == nil {
			return noHello()
		}
		return c.a.authorize(c.ctx, c.p, c.Spec().Procedure, msg)
	}
	return nil
}

func (c *authConn) Send(msg any) error {
	narrow(c.p, msg)
	return c.StreamingHandlerConn.Send(msg)
}

// maxActorBytes bounds the Pawl-Actor header: a name or an address.
const maxActorBytes = 256

// actorProblem says what is wrong with a Pawl-Actor header, which records
// and `pawl audit` show: longer than maxActorBytes, or holding invalid
// UTF-8 or a character that breaks display (textsafe.Breaking); "" when
// nothing is.
func actorProblem(a string) string {
	if len(a) > maxActorBytes {
		return fmt.Sprintf("is %d bytes", len(a))
	}
	if p := textsafe.Problem(a, textsafe.Breaking); p != "" {
		return "holds " + p
	}
	return ""
}

// Authenticate finds the principal of a request's credential in authn:
// its Authorization header's bearer token, else the verified client
// certificate on ctx (auth.WithPeerCertificates). It fails with
// Unauthenticated, saying what was wrong, when there is none or it is
// not in the auth file.
func Authenticate(ctx context.Context, authn *auth.Authenticator, authorization string) (auth.Principal, error) {
	var p auth.Principal
	var err error
	switch scheme, token, _ := strings.Cut(authorization, " "); {
	case authorization != "" && !strings.EqualFold(scheme, "Bearer"):
		err = fmt.Errorf("%w: the Authorization header must be \"Bearer <token>\"", auth.ErrUnauthenticated)
	case authorization != "":
		p, err = authn.Token(strings.TrimSpace(token))
	case len(auth.PeerCertificates(ctx)) > 0:
		p, err = authn.Certificate(auth.PeerCertificates(ctx)[0][0])
	default:
		err = fmt.Errorf("%w: the call carries no credential: send a bearer token (Authorization: Bearer pawl_...) or a client certificate", auth.ErrUnauthenticated)
	}
	if err != nil {
		return auth.Principal{}, connect.NewError(connect.CodeUnauthenticated, errors.New(strings.TrimPrefix(err.Error(), auth.ErrUnauthenticated.Error()+": ")))
	}
	return p, nil
}

// authenticate finds the caller's principal: a bearer token's, else a
// verified client certificate's; with Pawl-Actor as its on-behalf-of note.
func (a *authInterceptor) authenticate(ctx context.Context, authorization, onBehalfOf string) (auth.Principal, error) {
	if p := actorProblem(onBehalfOf); p != "" {
		return auth.Principal{}, InvalidArgument("the %s header %s; it must be at most %d bytes of UTF-8 without control or format characters",
			ActorHeader, p, maxActorBytes)
	}
	if a.authn == nil {
		p := auth.Open()
		p.OnBehalfOf = onBehalfOf
		return p, nil
	}
	p, err := Authenticate(ctx, a.authn, authorization)
	if err != nil {
		return auth.Principal{}, err
	}
	p.OnBehalfOf = onBehalfOf
	return p, nil
}

// authorize checks the principal against the procedure's permits, on the
// request message.
func (a *authInterceptor) authorize(ctx context.Context, p auth.Principal, procedure string, msg any) error {
	if p.IsAdmin() || AnyPrincipal[procedure] {
		return nil
	}
	permits, ok := RoleTable[procedure]
	if !ok {
		return denied(p, procedure, "admin")
	}
	var needs []string
	for _, permit := range permits {
		need, err := a.check(ctx, p, permit, msg)
		if err != nil {
			return err
		}
		if need == "" {
			return nil
		}
		if !slices.Contains(needs, need) {
			needs = append(needs, need)
		}
	}
	return denied(p, procedure, strings.Join(needs, ", or "))
}

func denied(p auth.Principal, procedure, needs string) error {
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s needs %s; principal %q has no such grant", procedure, needs, p.Name))
}

// check says what the permit would need that the principal lacks ("" when
// it holds), or fails the call (a read it needed failed).
func (a *authInterceptor) check(ctx context.Context, p auth.Principal, permit Permit, msg any) (string, error) {
	role := string(permit.Role)
	switch permit.Scope {
	case Everywhere:
		if p.Has(permit.Role) {
			return "", nil
		}
		return "role " + role, nil
	case Key:
		return keyNeed(p, permit.Role, msg.(interface{ GetKey() string }).GetKey()), nil
	case TxnKeys:
		m := msg.(*pawlv1.TxnRequest)
		for _, op := range m.GetOps() {
			if need := keyNeed(p, auth.Writer, op.GetKey()); need != "" {
				return need, nil
			}
		}
		for _, c := range m.GetCompares() {
			if need := keyNeed(p, auth.Reader, c.GetKey()); need != "" {
				return need, nil
			}
		}
		return "", nil
	case Prefix:
		prefix := msg.(interface{ GetPrefix() string }).GetPrefix()
		if p.MayPrefix(prefix) {
			return "", nil
		}
		return fmt.Sprintf("role %s on some key under %q", role, prefix), nil
	case Config:
		config := configOf(msg)
		if p.MayConfig(permit.Role, config) {
			return "", nil
		}
		return fmt.Sprintf("role %s on config %q", role, config), nil
	}
	identity, named := identityOf(p, msg)
	switch {
	case !p.Has(auth.Instance):
		return "role instance", nil
	case !named:
		return "role instance with the workload_identity named in the request (the credential names more than one)", nil
	}
	if !p.InstanceCredential(identity) {
		return fmt.Sprintf("role instance for identity %q", identity), nil
	}
	switch permit.Scope {
	case Registered:
		return a.registeredBy(ctx, p, identity, bootOf(msg))
	case Assigned:
		return a.assigned(ctx, identity, msg)
	}
	return "", nil
}

// keyNeed is what reading or writing key needs that p lacks ("": nothing).
func keyNeed(p auth.Principal, role auth.Role, key string) string {
	switch {
	case p.MayKey(role, key):
		return ""
	case strings.HasPrefix(key, auth.SystemPrefix):
		return fmt.Sprintf("role admin for key %q (keys under %s are Pawl's own records)", key, auth.SystemPrefix)
	}
	return fmt.Sprintf("role %s on key %q", role, key)
}

// registeredBy checks that the identity's current registration is the
// principal's: an instance speaks only as a registration it made.
func (a *authInterceptor) registeredBy(ctx context.Context, p auth.Principal, identity, boot string) (string, error) {
	rec, err := a.registry.Registration(ctx, identity, boot)
	switch {
	case errors.Is(err, instance.ErrNotFound):
		return fmt.Sprintf("role instance for identity %q, registered by the caller (it is not registered)", identity), nil
	case err != nil:
		return "", Error(a.log, connect.Spec{}, err)
	case rec.Principal != p.Name:
		a.log.Warn("refused a call for an identity another principal registered", "principal", p.Name, "identity", identity)
		return fmt.Sprintf("role instance for identity %q, registered by the caller (another principal registered it)", identity), nil
	}
	return "", nil
}

// assigned checks that the identity is assigned the release (GetRelease)
// or a release whose validator it is (Download). The views are read as
// they are, and once more after they caught up with the store, so that an
// assignment sent by another replica is found.
func (a *authInterceptor) assigned(ctx context.Context, identity string, msg any) (string, error) {
	var match func(rollout.Assignment) bool
	var what string
	var configs []string
	switch m := msg.(type) {
	case *pawlv1.GetReleaseRequest:
		if m.GetGeneration() == 0 {
			return "role instance with the generation it is assigned named (not 0)", nil
		}
		configs = []string{m.GetConfigId()}
		match = func(as rollout.Assignment) bool {
			return as.ConfigID == m.GetConfigId() && as.Generation == m.GetGeneration()
		}
		what = fmt.Sprintf("config %q generation %d", m.GetConfigId(), m.GetGeneration())
	case *pawlv1.DownloadRequest:
		match = func(as rollout.Assignment) bool { return as.ValidatorDigest == m.GetDigest() }
		what = "validator " + m.GetDigest()
	}
	byConfig, _, err := a.rollouts.AssignmentsAt(ctx, identity, 0, configs)
	if err != nil {
		return "", Error(a.log, connect.Spec{}, err)
	}
	for _, as := range byConfig {
		if slices.ContainsFunc(as, match) {
			return "", nil
		}
	}
	current, _, err := a.rollouts.Assignments(ctx, identity)
	if err != nil {
		return "", Error(a.log, connect.Spec{}, err)
	}
	if slices.ContainsFunc(current, match) {
		return "", nil
	}
	return fmt.Sprintf("role instance for an identity assigned %s (%q is not)", what, identity), nil
}

// configOf is the config a request names.
func configOf(msg any) string {
	switch m := msg.(type) {
	case *pawlv1.CreateReleaseRequest:
		return m.GetSpec().GetConfigId()
	case interface{ GetConfigId() string }:
		return m.GetConfigId()
	}
	return ""
}

// identityOf is the workload identity a request speaks for; a download
// that names none is for the credential's one identity, if it has one.
func identityOf(p auth.Principal, msg any) (string, bool) {
	var id string
	switch m := msg.(type) {
	case *pawlv1.RegisterRequest:
		id = m.GetInstance().GetWorkloadIdentity()
	case *pawlv1.AckRequest:
		id = m.GetAck().GetWorkloadIdentity()
	case *pawlv1.SessionRequest:
		id = m.GetHello().GetInstance().GetWorkloadIdentity()
	case interface{ GetWorkloadIdentity() string }:
		id = m.GetWorkloadIdentity()
	}
	if id == "" {
		return p.SoleIdentity()
	}
	return id, true
}

// bootOf is the boot a request speaks for.
func bootOf(msg any) string {
	switch m := msg.(type) {
	case *pawlv1.AckRequest:
		return m.GetAck().GetBootId()
	case interface{ GetBootId() string }:
		return m.GetBootId()
	}
	return ""
}

// narrow leaves out of a response what a non-admin principal may not see:
// keys it may not read (List, Watch), and the boot IDs and membership
// epochs of instances, which an ACK needs (ListInstances,
// GetRolloutStatus, ListApplied).
func narrow(p auth.Principal, msg any) {
	switch m := msg.(type) {
	case *pawlv1.ListResponse:
		m.Kvs = slices.DeleteFunc(m.Kvs, func(kv *pawlv1.KeyValue) bool { return !p.MayKey(auth.Reader, kv.GetKey()) })
	case *pawlv1.WatchResponse:
		events := m.GetEvents()
		if events == nil {
			return
		}
		last := events.Events[len(events.Events)-1].GetKv().GetModRevision()
		events.Events = slices.DeleteFunc(events.Events, func(ev *pawlv1.Event) bool { return !p.MayKey(auth.Reader, ev.GetKv().GetKey()) })
		if len(events.Events) == 0 {
			// Nothing readable changed: the watcher is current all the same.
			m.Kind = &pawlv1.WatchResponse_Progress{Progress: &pawlv1.WatchProgress{Revision: last}}
		}
	case *pawlv1.SessionResponse:
		for _, wm := range m.GetWatches() {
			narrow(p, wm.GetResponse())
		}
	case *pawlv1.ListInstancesResponse:
		for _, rec := range m.GetInstances() {
			rec.MembershipEpoch = 0
			if rec.GetInstance() != nil {
				rec.Instance.BootId = ""
			}
		}
	case *pawlv1.GetRolloutStatusResponse:
		for _, ack := range m.GetAcks() {
			ack.BootId, ack.MembershipEpoch = "", 0
		}
	case *pawlv1.ListAppliedResponse:
		for _, rec := range m.GetApplied() {
			rec.BootId, rec.MembershipEpoch = "", 0
		}
	}
}
