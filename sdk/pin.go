package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// PinHeader is the HTTP header that carries a request's pinned generations
// downstream: comma-separated CONFIG=GENERATION pairs, e.g.
//
//	Pawl-Pin: limits=3,routing=7
//
// Config IDs are as releases name them (1-128 of a-z 0-9 . _ -, starting
// with a letter or digit), generations positive decimal integers; spaces
// around items are allowed, a config appears once, and at most MaxPins
// appear. A service forwards every pin it received, including pins of
// configs it does not read itself, so a pin holds across a chain of calls.
const PinHeader = "Pawl-Pin"

// MissingPinHeader names, in a refusal, the pin this instance could not
// honour: CONFIG=GENERATION.
const MissingPinHeader = "Pawl-Pin-Missing"

// MaxPins bounds the pairs of a PinHeader.
const MaxPins = 64

// pinSet is what a request reads: for each config this instance has, the
// snapshot pinned, and every generation pinned upstream (forwarded as is).
type pinSet struct {
	snaps    map[string]*Snapshot // immutable
	upstream map[string]int64     // nil when the request came without pins
}

type pinKey struct{}

// Pin returns ctx with the snapshot of every applied config pinned: for
// the rest of the request, Pinned(ctx, id) reads the generation that was
// current at this call, however many swaps happen meanwhile. A ctx that is
// pinned already is returned unchanged. The middleware and the interceptor
// pin every request they serve; call Pin where requests start otherwise
// (a job, a consumer loop).
func (c *Client) Pin(ctx context.Context) context.Context {
	if ctx.Value(pinKey{}) != nil {
		return ctx
	}
	return context.WithValue(ctx, pinKey{}, &pinSet{snaps: *c.current.Load()})
}

// Pinned returns the snapshot of config id that ctx pinned, or nil when ctx
// is not pinned or the instance had no snapshot of id. It takes no lock
// and allocates nothing. A handler that may run without the middleware
// or the interceptor (a job, a test, a mux that forgot it) reads with
// Client.Pinned instead, which falls back to the current snapshot.
func Pinned(ctx context.Context, id string) *Snapshot {
	p, _ := ctx.Value(pinKey{}).(*pinSet)
	if p == nil {
		return nil
	}
	return p.snaps[id]
}

// IsPinned reports whether ctx was pinned (by Pin, the middleware or the
// interceptor).
func IsPinned(ctx context.Context) bool {
	p, _ := ctx.Value(pinKey{}).(*pinSet)
	return p != nil
}

// Pinned returns the snapshot of config id that ctx pinned, like the
// package's Pinned; when ctx is not pinned (the handler is not wrapped
// with Middleware or Interceptor, and no Pin started the request) it
// falls back to the current snapshot, Config(id), so a read never fails
// for want of the middleware, but two reads of one request may then see
// two generations. It returns nil only when the instance has no snapshot
// of id (in the pin, or at all).
func (c *Client) Pinned(ctx context.Context, id string) *Snapshot {
	p, _ := ctx.Value(pinKey{}).(*pinSet)
	if p == nil {
		return c.Config(id)
	}
	return p.snaps[id]
}

// PinHeaderValue renders the pins of ctx as a PinHeader value: the
// pinned snapshots' generations and the pins received from upstream for
// configs this instance does not have. It is empty when ctx is not
// pinned.
func PinHeaderValue(ctx context.Context) string {
	p, _ := ctx.Value(pinKey{}).(*pinSet)
	if p == nil {
		return ""
	}
	gens := make(map[string]int64, len(p.snaps)+len(p.upstream))
	for id, gen := range p.upstream {
		gens[id] = gen
	}
	for id, s := range p.snaps {
		gens[id] = s.Generation
	}
	ids := make([]string, 0, len(gens))
	for id := range gens {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(gens[id], 10))
	}
	return b.String()
}

// MissingPinError says a request was pinned to a generation this instance
// does not have, and did not get within the pin wait. The middleware
// answers it with HTTP 409, the interceptor with FailedPrecondition.
type MissingPinError struct {
	// Config and Generation are the pin.
	Config     string
	Generation int64
	// Have is the generation this instance runs (0: none yet).
	Have int64
	// Waited is how long the request waited for it.
	Waited time.Duration
}

func (e *MissingPinError) Error() string {
	return fmt.Sprintf("pawl: the request is pinned to %s generation %d, which this instance does not have (it runs generation %d; waited %s)",
		e.Config, e.Generation, e.Have, e.Waited)
}

// ErrBadPinHeader says a PinHeader could not be read.
var ErrBadPinHeader = errors.New("pawl: malformed " + PinHeader + " header")

var configIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ParsePinHeader reads a PinHeader value; empty means no pins.
func ParsePinHeader(v string) (map[string]int64, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	items := strings.Split(v, ",")
	if len(items) > MaxPins {
		return nil, fmt.Errorf("%w: %d pins, more than %d", ErrBadPinHeader, len(items), MaxPins)
	}
	out := make(map[string]int64, len(items))
	for _, item := range items {
		id, genText, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !configIDPattern.MatchString(id) {
			return nil, fmt.Errorf("%w: %q is not CONFIG=GENERATION", ErrBadPinHeader, item)
		}
		gen, err := strconv.ParseInt(genText, 10, 64)
		if err != nil || gen <= 0 {
			return nil, fmt.Errorf("%w: %q: the generation must be a positive integer", ErrBadPinHeader, item)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("%w: %s is pinned twice", ErrBadPinHeader, id)
		}
		out[id] = gen
	}
	return out, nil
}

// pinFrom pins ctx for a request that arrived with header value v: each
// config pinned upstream that this instance has reads the pinned
// generation, waiting up to the pin wait for it to be applied; every other
// config reads its current snapshot.
func (c *Client) pinFrom(ctx context.Context, v string) (context.Context, error) {
	want, err := ParsePinHeader(v)
	if err != nil {
		return ctx, err
	}
	if len(want) == 0 {
		return c.Pin(ctx), nil
	}
	current := *c.current.Load()
	snaps := current
	copied := false
	start := time.Now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for id, gen := range want {
		if s := current[id]; s != nil && s.Generation == gen {
			continue
		}
		for {
			s, known, changed := c.retainedGeneration(id, gen)
			if s != nil {
				if !copied {
					snaps, copied = make(map[string]*Snapshot, len(current)), true
					for k, v := range current {
						snaps[k] = v
					}
				}
				snaps[id] = s
				break
			}
			if !known && !c.follows(id) {
				break // a config this instance does not read: forwarded only
			}
			if timer == nil {
				timer = time.NewTimer(c.cfg.pinWait)
			}
			select {
			case <-changed:
				continue
			case <-timer.C:
			case <-ctx.Done():
			}
			var have int64
			if s := c.Config(id); s != nil {
				have = s.Generation
			}
			return ctx, &MissingPinError{Config: id, Generation: gen, Have: have, Waited: time.Since(start).Round(time.Millisecond)}
		}
	}
	return context.WithValue(ctx, pinKey{}, &pinSet{snaps: snaps, upstream: want}), nil
}

// follows reports whether the instance reads config id: it was assigned
// to it, or named in WithConfigs.
func (c *Client) follows(id string) bool {
	if c.cfg.configs != nil && c.cfg.configs[id] {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assigned[id]
}

// Middleware serves next with every request pinned (from its PinHeader
// when it has one, else to the current snapshots) and measured: each
// response's latency, and whether it failed (a 5xx status), feed the
// health reports of releases on trial. A request pinned to a generation
// this instance does not get within the pin wait is answered 409 Conflict,
// with MissingPinHeader set; a malformed PinHeader 400.
func (c *Client) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, err := c.pinFrom(r.Context(), r.Header.Get(PinHeader))
		if err != nil {
			var missing *MissingPinError
			if errors.As(err, &missing) {
				w.Header().Set(MissingPinHeader, missing.Config+"="+strconv.FormatInt(missing.Generation, 10))
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(ctx))
		end := time.Now()
		c.health.record(end, end.Sub(start), rec.status >= 500)
	})
}

// statusRecorder remembers a response's status.
type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.status, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's other methods
// (Flush, Hijack, deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// PinTransport sends each request's pins (PinHeaderValue of its context)
// in the PinHeader, unless the request sets the header itself. base nil
// means http.DefaultTransport.
func PinTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return pinTransport{base}
}

type pinTransport struct{ base http.RoundTripper }

func (t pinTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if v := PinHeaderValue(r.Context()); v != "" && r.Header.Get(PinHeader) == "" {
		r = r.Clone(r.Context())
		r.Header.Set(PinHeader, v)
	}
	return t.base.RoundTrip(r)
}

// Interceptor is a Connect interceptor for both sides of a call. On a
// client it sends the call context's pins in the PinHeader. On a handler
// it pins the call (from the PinHeader when it has one) and measures it:
// its latency, and whether it failed with a server-side code (unknown,
// internal, unavailable, data loss), feed the health reports of releases
// on trial; a call pinned to a generation this instance does not get
// within the pin wait fails with FailedPrecondition, and a malformed
// PinHeader with InvalidArgument.
func (c *Client) Interceptor() connect.Interceptor { return pinInterceptor{c} }

type pinInterceptor struct{ c *Client }

func (p pinInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			if v := PinHeaderValue(ctx); v != "" && req.Header().Get(PinHeader) == "" {
				req.Header().Set(PinHeader, v)
			}
			return next(ctx, req)
		}
		ctx, err := p.c.pinFrom(ctx, req.Header().Get(PinHeader))
		if err != nil {
			return nil, pinError(err)
		}
		start := time.Now()
		resp, err := next(ctx, req)
		p.c.measure(start, err)
		return resp, err
	}
}

func (p pinInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if v := PinHeaderValue(ctx); v != "" && conn.RequestHeader().Get(PinHeader) == "" {
			conn.RequestHeader().Set(PinHeader, v)
		}
		return conn
	}
}

func (p pinInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := p.c.pinFrom(ctx, conn.RequestHeader().Get(PinHeader))
		if err != nil {
			return pinError(err)
		}
		start := time.Now()
		err = next(ctx, conn)
		p.c.measure(start, err)
		return err
	}
}

// pinError maps a pinning failure to its Connect error.
func pinError(err error) error {
	var missing *MissingPinError
	if errors.As(err, &missing) {
		cerr := connect.NewError(connect.CodeFailedPrecondition, err)
		cerr.Meta().Set(MissingPinHeader, missing.Config+"="+strconv.FormatInt(missing.Generation, 10))
		return cerr
	}
	return connect.NewError(connect.CodeInvalidArgument, err)
}

// measure records a handled call's outcome for health windows.
func (c *Client) measure(start time.Time, err error) {
	end := time.Now()
	failed := false
	switch connect.CodeOf(err) {
	case connect.CodeUnknown, connect.CodeInternal, connect.CodeUnavailable, connect.CodeDataLoss:
		failed = err != nil
	}
	c.health.record(end, end.Sub(start), failed)
}
