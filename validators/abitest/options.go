package abitest

import (
	"fmt"
	"time"

	"github.com/pawlcfg/pawl/validators/host"
)

// Option configures Run.
type Option func(*options)

type options struct {
	cases          []Case
	params         []byte
	timeout        time.Duration
	memoryLimit    int
	maxOutput      int
	maxModuleBytes int
	limits         host.ModuleLimits
	compileTimeout time.Duration
	cacheDir       string
	largeInput     int
}

// The defaults are the server's (pawld's flags of the same names) and the
// SDK's: a module that passes with them passes on a server that keeps them.
func defaultOptions() options {
	return options{
		timeout:        host.DefaultTimeout,
		memoryLimit:    host.DefaultMemoryLimit,
		maxOutput:      host.DefaultMaxOutput,
		maxModuleBytes: host.DefaultMaxModuleBytes,
		limits:         host.DefaultModuleLimits,
		compileTimeout: host.DefaultCompileTimeout,
		largeInput:     DefaultLargeInput,
	}
}

func (o options) validate() error {
	switch {
	case o.maxModuleBytes <= 0:
		return fmt.Errorf("abitest: WithMaxModuleBytes(%d): must be positive", o.maxModuleBytes)
	case o.largeInput < 2:
		return fmt.Errorf("abitest: WithLargeInput(%d): must be at least 2 bytes", o.largeInput)
	case o.params != nil && !validJSON(o.params):
		return fmt.Errorf("abitest: WithParams: the parameters are not a JSON document")
	}
	return nil
}

// WithCases adds the author's cases (see LoadCases).
func WithCases(cases ...Case) Option { return func(o *options) { o.cases = append(o.cases, cases...) } }

// WithParams sets the validator parameters (a JSON document) of the
// built-in inputs and of every case that gives none of its own.
func WithParams(params []byte) Option { return func(o *options) { o.params = params } }

// WithTimeout sets the time limit of one call (default host.DefaultTimeout,
// as pawld --validator-timeout).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMemoryLimit sets the memory limit of one instance, in bytes (default
// host.DefaultMemoryLimit, as pawld --validator-memory-bytes).
func WithMemoryLimit(n int) Option { return func(o *options) { o.memoryLimit = n } }

// WithMaxOutput sets the largest result, in bytes (default
// host.DefaultMaxOutput).
func WithMaxOutput(n int) Option { return func(o *options) { o.maxOutput = n } }

// WithMaxModuleBytes sets the largest module an upload accepts (default
// host.DefaultMaxModuleBytes, as pawld --max-validator-bytes).
func WithMaxModuleBytes(n int) Option { return func(o *options) { o.maxModuleBytes = n } }

// WithModuleLimits sets the bounds of the module's shape (default
// host.DefaultModuleLimits, as pawld's --validator-max-* flags).
func WithModuleLimits(l host.ModuleLimits) Option { return func(o *options) { o.limits = l } }

// WithCompileTimeout bounds the module's compilation (default
// host.DefaultCompileTimeout, as pawld --validator-compile-timeout).
func WithCompileTimeout(d time.Duration) Option { return func(o *options) { o.compileTimeout = d } }

// WithCacheDir keeps compiled code in dir between runs (host.WithCacheDir).
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithLargeInput sets the size of the built-in "large" input, a JSON array
// of zeros (default DefaultLargeInput), for modules that must validate
// larger configs within the time limit.
func WithLargeInput(n int) Option { return func(o *options) { o.largeInput = n } }
