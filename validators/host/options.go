package host

import (
	"fmt"
	"runtime"
	"time"
)

// Option configures New.
type Option func(*options)

type options struct {
	memoryLimit int
	timeout     time.Duration
	maxOutput   int
	poolSize    int
	cacheDir    string
}

const (
	// DefaultMemoryLimit bounds each instance's linear memory.
	DefaultMemoryLimit = 64 << 20
	// DefaultTimeout bounds each call: config validation is a fast check,
	// and a second is long enough for a JSON Schema over a large document.
	DefaultTimeout = time.Second
	// DefaultMaxOutput bounds a result: violations, not a copy of the config.
	DefaultMaxOutput = 1 << 20
)

func defaultOptions() options {
	return options{
		memoryLimit: DefaultMemoryLimit,
		timeout:     DefaultTimeout,
		maxOutput:   DefaultMaxOutput,
		// One instance per core keeps every core busy; more only costs
		// memory (a Go module's instance holds a few MiB).
		poolSize: runtime.GOMAXPROCS(0),
	}
}

func (o options) validate() error {
	switch {
	case o.memoryLimit < wasmPageSize || o.memoryLimit%wasmPageSize != 0:
		return fmt.Errorf("validator: WithMemoryLimit(%d): must be a positive multiple of 64 KiB", o.memoryLimit)
	case o.timeout <= 0:
		return fmt.Errorf("validator: WithTimeout(%s): must be positive", o.timeout)
	case o.maxOutput <= 0:
		return fmt.Errorf("validator: WithMaxOutput(%d): must be positive", o.maxOutput)
	case o.poolSize <= 0:
		return fmt.Errorf("validator: WithPoolSize(%d): must be positive", o.poolSize)
	}
	return nil
}

// WithMemoryLimit bounds each instance's memory, in bytes (a multiple of
// 64 KiB; default 64 MiB).
func WithMemoryLimit(n int) Option { return func(o *options) { o.memoryLimit = n } }

// WithTimeout bounds each call (default 1s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithMaxOutput bounds a call's result, in bytes (default 1 MiB).
func WithMaxOutput(n int) Option { return func(o *options) { o.maxOutput = n } }

// WithPoolSize sets how many instances of one module may run at once
// (default GOMAXPROCS).
func WithPoolSize(n int) Option { return func(o *options) { o.poolSize = n } }

// WithCacheDir keeps compiled code in dir, so that a restart does not
// compile the same modules again.
func WithCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }
