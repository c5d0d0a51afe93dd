// Package openfeature is an OpenFeature provider backed by a Pawl SDK
// client, for services that already evaluate flags through OpenFeature
// (github.com/open-feature/go-sdk). Flags are values inside configs that
// Pawl releases: a flag key is a JSON pointer into a config.
//
// Flag keys. With WithConfig(id), every flag is a JSON pointer (or dotted
// path) into config id: "/max_amount", "checkout.enabled". Without it, a
// flag key names the config and the pointer together, split at the first
// "/": "limits/max_amount" reads /max_amount of config "limits" (config
// IDs hold no "/"), and "limits" alone is the whole document.
//
// Evaluation. Bool, string, int, float and object flags read the value at
// the pointer (sdk.Lookup) of the config's applied snapshot, never
// blocking. The variant is the snapshot ("limits@7"); the flag metadata
// holds config, generation, stage and content_digest. The reason is
// STATIC for a snapshot the server confirmed while the client is
// connected, CACHED while the client serves from its disk cache or the
// server is unreachable. A missing value gives the default with
// FLAG_NOT_FOUND, a value of another type TYPE_MISMATCH, a config never
// applied PROVIDER_NOT_READY.
//
// Events. Init returns once the configs the provider waits for (the one of
// WithConfig, and those of WithWaitFor) are applied, so OpenFeature emits
// PROVIDER_READY; it fails (PROVIDER_ERROR) when they are not applied
// within the init timeout. Afterwards the provider emits
// PROVIDER_CONFIGURATION_CHANGED (with the config's flag key as the
// change) on every apply, PROVIDER_STALE when it serves from the cache or
// the server is unreachable, PROVIDER_ERROR when the server is
// unreachable and a config it waits for has no snapshot at all, and
// PROVIDER_READY when it is back to fresh snapshots.
package openfeature

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	of "github.com/open-feature/go-sdk/openfeature"

	"github.com/pawlcfg/pawl/sdk"
)

// Provider is an OpenFeature FeatureProvider, StateHandler and
// EventHandler reading flags from a Pawl SDK client. Its methods are safe
// for concurrent use.
type Provider struct {
	client      *sdk.Client
	config      string
	waitFor     []string
	initTimeout time.Duration

	events chan of.Event
	poke   chan struct{}

	// changedMu guards changed alone: the client's callbacks take it,
	// and nothing is called while it is held.
	changedMu sync.Mutex
	changed   map[string]bool // configs applied since the last look

	mu    sync.Mutex
	state of.State
	stop  func()
	done  chan struct{}
}

// Option configures a Provider.
type Option func(*Provider)

// WithConfig makes every flag key a JSON pointer (or dotted path) into
// config id, and makes Init wait for it.
func WithConfig(id string) Option {
	return func(p *Provider) { p.config = id }
}

// WithWaitFor makes Init wait until each of ids is applied (a snapshot of
// the server or of the cache), and PROVIDER_ERROR name them when the
// server is unreachable and one has none.
func WithWaitFor(ids ...string) Option {
	return func(p *Provider) { p.waitFor = append(p.waitFor, ids...) }
}

// WithInitTimeout bounds Init when its context has no deadline
// (OpenFeature's SetProvider and SetProviderAndWait pass none). The
// default is 30 seconds.
func WithInitTimeout(d time.Duration) Option {
	return func(p *Provider) { p.initTimeout = d }
}

// DefaultInitTimeout is how long Init waits for its configs by default.
const DefaultInitTimeout = 30 * time.Second

// New returns a provider reading flags from client, which the caller
// keeps and closes after the provider's Shutdown.
func New(client *sdk.Client, opts ...Option) *Provider {
	p := &Provider{client: client, initTimeout: DefaultInitTimeout, events: make(chan of.Event, 16),
		poke: make(chan struct{}, 1), changed: map[string]bool{}, state: of.NotReadyState}
	for _, o := range opts {
		o(p)
	}
	if p.config != "" {
		p.waitFor = append([]string{p.config}, p.waitFor...)
	}
	return p
}

// Metadata names the provider.
func (p *Provider) Metadata() of.Metadata { return of.Metadata{Name: "pawl"} }

// Hooks returns no hooks.
func (p *Provider) Hooks() []of.Hook { return nil }

// EventChannel is where the provider's events go.
func (p *Provider) EventChannel() <-chan of.Event { return p.events }

// Init waits for the configs, bounded by the init timeout.
func (p *Provider) Init(ec of.EvaluationContext) error {
	return p.InitWithContext(context.Background(), ec)
}

// InitWithContext waits until every config the provider waits for is
// applied, or ctx ends, or the init timeout passes when ctx has no
// deadline (an error naming the config missing), then starts following
// the client's applies and its link to the server.
func (p *Provider) InitWithContext(ctx context.Context, _ of.EvaluationContext) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.initTimeout)
		defer cancel()
	}
	for _, id := range p.waitFor {
		if _, err := p.client.Wait(ctx, id); err != nil {
			return fmt.Errorf("pawl provider: config %s was not applied: %w", id, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return nil
	}
	// The client's subscriptions take the client's lock, and its
	// callbacks changedMu only: p.mu is never taken inside them.
	stopChange := p.client.OnChange("", func(s *sdk.Snapshot) {
		p.changedMu.Lock()
		p.changed[s.Config] = true
		p.changedMu.Unlock()
		p.nudge()
	})
	stopLink := p.client.OnConnection(func(sdk.Connection) { p.nudge() })
	ctx, cancel := context.WithCancel(context.Background())
	p.done = make(chan struct{})
	p.stop = func() {
		stopChange()
		stopLink()
		cancel()
	}
	p.state = of.ReadyState // what OpenFeature emits when Init returns
	go p.run(ctx, p.done)
	p.nudge() // a stale start is told at once
	return nil
}

// Shutdown stops following the client.
func (p *Provider) Shutdown() { _ = p.ShutdownWithContext(context.Background()) }

// ShutdownWithContext stops following the client, waiting for the
// provider's goroutine until ctx ends.
func (p *Provider) ShutdownWithContext(ctx context.Context) error {
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Provider) nudge() {
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// run turns the client's applies and link changes into events.
func (p *Provider) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.poke:
		}
		p.changedMu.Lock()
		changed := p.changed
		p.changed = map[string]bool{}
		p.changedMu.Unlock()
		flags := slices.Sorted(maps.Keys(changed))
		if len(flags) > 0 && !p.emit(ctx, of.Event{ProviderName: "pawl", EventType: of.ProviderConfigChange,
			ProviderEventDetails: of.ProviderEventDetails{Message: "applied " + strings.Join(flags, ", "), FlagChanges: flags}}) {
			return
		}
		state, why := p.judge()
		p.mu.Lock()
		moved := state != p.state
		p.state = state
		p.mu.Unlock()
		if !moved {
			continue
		}
		ev := of.Event{ProviderName: "pawl", ProviderEventDetails: of.ProviderEventDetails{Message: why}}
		switch state {
		case of.ReadyState:
			ev.EventType = of.ProviderReady
		case of.StaleState:
			ev.EventType = of.ProviderStale
		default:
			ev.EventType = of.ProviderError
			ev.ErrorCode = of.ProviderNotReadyCode
		}
		if !p.emit(ctx, ev) {
			return
		}
	}
}

func (p *Provider) emit(ctx context.Context, ev of.Event) bool {
	select {
	case p.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// judge says what state the provider is in, and why.
func (p *Provider) judge() (of.State, string) {
	conn := p.client.Connection()
	for _, id := range p.waitFor {
		if p.client.Config(id) == nil && !conn.Up {
			return of.ErrorState, fmt.Sprintf("config %s has no snapshot and the server is unreachable: %v", id, conn.Err)
		}
	}
	if !conn.Up {
		return of.StaleState, fmt.Sprintf("the server is unreachable (%v): serving the last applied snapshots", conn.Err)
	}
	ids := p.waitFor
	if len(ids) == 0 {
		ids = slices.Sorted(maps.Keys(p.client.Configs()))
	}
	for _, id := range ids {
		if s := p.client.Config(id); s != nil && s.FromCache {
			return of.StaleState, fmt.Sprintf("config %s is served from the cache until the server confirms it", id)
		}
	}
	return of.ReadyState, "serving the server's snapshots"
}

// flag splits a flag key into its config and pointer.
func (p *Provider) flag(key string) (config, pointer string) {
	if p.config != "" {
		return p.config, key
	}
	config, rest, found := strings.Cut(key, "/")
	if !found {
		return config, ""
	}
	return config, "/" + rest
}

// resolve reads flag key as a T.
func resolve[T any](p *Provider, key string, def T) of.GenericResolutionDetail[T] {
	config, pointer := p.flag(key)
	s := p.client.Config(config)
	if s == nil {
		return of.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: of.ProviderResolutionDetail{
			Reason: of.ErrorReason, ResolutionError: of.NewProviderNotReadyResolutionError("config " + config + " has no snapshot"),
		}}
	}
	detail := of.ProviderResolutionDetail{Variant: s.String(), Reason: of.StaticReason, FlagMetadata: of.FlagMetadata{
		"config": s.Config, "generation": s.Generation, "stage": s.Stage, "content_digest": s.ContentDigest,
	}}
	if s.FromCache || !p.client.Connection().Up {
		detail.Reason = of.CachedReason
	}
	v, err := sdk.Lookup[T](s, "", pointer)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		detail.Reason, detail.ResolutionError = of.ErrorReason, of.NewFlagNotFoundResolutionError(err.Error())
		return of.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: detail}
	case errors.Is(err, sdk.ErrNotJSON):
		detail.Reason, detail.ResolutionError = of.ErrorReason, of.NewParseErrorResolutionError(err.Error())
		return of.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: detail}
	case err != nil:
		detail.Reason, detail.ResolutionError = of.ErrorReason, of.NewTypeMismatchResolutionError(err.Error())
		return of.GenericResolutionDetail[T]{Value: def, ProviderResolutionDetail: detail}
	}
	return of.GenericResolutionDetail[T]{Value: v, ProviderResolutionDetail: detail}
}

// BooleanEvaluation reads a boolean flag.
func (p *Provider) BooleanEvaluation(_ context.Context, flag string, def bool, _ of.FlattenedContext) of.BoolResolutionDetail {
	return resolve(p, flag, def)
}

// StringEvaluation reads a string flag.
func (p *Provider) StringEvaluation(_ context.Context, flag string, def string, _ of.FlattenedContext) of.StringResolutionDetail {
	return resolve(p, flag, def)
}

// FloatEvaluation reads a number flag as a float64.
func (p *Provider) FloatEvaluation(_ context.Context, flag string, def float64, _ of.FlattenedContext) of.FloatResolutionDetail {
	return resolve(p, flag, def)
}

// IntEvaluation reads an integer flag (a number with a fraction is a
// type mismatch).
func (p *Provider) IntEvaluation(_ context.Context, flag string, def int64, _ of.FlattenedContext) of.IntResolutionDetail {
	return resolve(p, flag, def)
}

// ObjectEvaluation reads any JSON value (an object as map[string]any, an
// array as []any, numbers as float64), a copy the caller may change.
func (p *Provider) ObjectEvaluation(_ context.Context, flag string, def any, _ of.FlattenedContext) of.InterfaceResolutionDetail {
	return resolve(p, flag, def)
}

var (
	_ of.FeatureProvider          = (*Provider)(nil)
	_ of.ContextAwareStateHandler = (*Provider)(nil)
	_ of.EventHandler             = (*Provider)(nil)
)
