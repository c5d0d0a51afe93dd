package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/pawlcfg/pawl/validators/abi"
)

// Input is one validation request.
type Input = abi.Input

// Violation is one problem the validator found.
type Violation = abi.Violation

// Result is a validator's verdict.
type Result = abi.Result

// Validator is one loaded module with its pool of instances. Validate may be
// called from many goroutines; at most the pool size run at once, the rest
// wait their turn.
type Validator struct {
	r        *Runtime
	compiled *compiledModule
	info     Info

	slots chan struct{}  // one token per running call
	idle  chan *instance // instances ready for a call

	closeOnce sync.Once
}

// Info describes the module.
func (v *Validator) Info() Info { return v.info }

// Close releases the module's idle instances and its share of the compiled
// code; an instance in a running call is released when the call ends.
func (v *Validator) Close(ctx context.Context) error {
	v.closeOnce.Do(func() {
		v.r.mu.Lock()
		delete(v.r.validators, v)
		v.r.mu.Unlock()
		v.DiscardIdle(ctx)
		v.compiled.release(ctx)
	})
	return nil
}

// DiscardIdle closes the module's idle instances, so that the next call
// runs on a fresh one, instantiated as after a failure. Instances in a
// running call are not affected. The conformance kit (validators/abitest)
// compares a fresh instance's verdict with a reused one's this way.
func (v *Validator) DiscardIdle(ctx context.Context) {
	for {
		select {
		case inst := <-v.idle:
			inst.close(ctx)
		default:
			return
		}
	}
}

// Validate runs the module on in. Errors: *TimeoutError, a *LimitError
// matching ErrMemoryLimit or ErrOutputTooLarge, *TrapError, ErrBadOutput,
// a *LimitError when the runtime's memory budget has no room for an
// instance within the call's time limit, or ctx's error while waiting for
// a free instance. The instance of a failed call is discarded; that of a
// call that succeeded is kept for the next, unless another call waits for
// memory.
func (v *Validator) Validate(ctx context.Context, in Input) (Result, error) {
	select {
	case v.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	defer func() { <-v.slots }()
	var inst *instance
	select {
	case inst = <-v.idle:
	default:
		var err error
		if inst, err = v.instantiate(ctx); err != nil {
			return Result{}, err
		}
	}
	res, err := inst.validate(ctx, in, v.r.opts)
	if err != nil {
		inst.close(context.Background())
		return Result{}, err
	}
	if v.r.memWaiters.Load() > 0 {
		inst.close(context.Background()) // its memory goes to the call that waits
	} else {
		v.idle <- inst // never blocks: at most cap(slots) instances exist outside idle
	}
	return res, nil
}

// instance is one instantiated module; used by one call at a time.
type instance struct {
	mod        api.Module
	alloc      api.Function
	validateFn api.Function
	version    api.Function
	stderr     *limitedBuffer
	r          *Runtime // whose memory budget the instance holds a token of
}

// instantiate makes an instance, within the runtime's memory budget.
func (v *Validator) instantiate(ctx context.Context) (*instance, error) {
	if err := v.r.acquireMemory(ctx); err != nil {
		return nil, err
	}
	stderr := &limitedBuffer{max: 4 << 10}
	clock := &virtualClock{}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_initialize").
		WithStderr(stderr).
		WithWalltime(func() (int64, int32) { return fixedTime.Unix(), int32(fixedTime.Nanosecond()) }, sys.ClockResolution(1)).
		WithNanotime(clock.nanotime, sys.ClockResolution(1)).
		WithNanosleep(clock.nanosleep).
		WithRandSource(zeroReader{})
	ictx, cancel := context.WithTimeout(ctx, v.r.opts.timeout)
	defer cancel()
	mod, err := v.r.rt.InstantiateModule(ictx, v.compiled.mod, cfg)
	if err != nil {
		<-v.r.memory
		return nil, callError(ictx, err, nil, stderr, v.r.opts)
	}
	return &instance{
		mod:        mod,
		alloc:      mod.ExportedFunction("pawl_alloc"),
		validateFn: mod.ExportedFunction("pawl_validate"),
		version:    mod.ExportedFunction("pawl_abi_version"),
		stderr:     stderr,
		r:          v.r,
	}, nil
}

// close closes the instance and gives its memory back to the budget.
func (i *instance) close(ctx context.Context) {
	_ = i.mod.Close(ctx)
	<-i.r.memory
}

func (i *instance) abiVersion(ctx context.Context, limit time.Duration) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res, err := i.version.Call(cctx)
	if err != nil {
		return 0, callError(cctx, err, i.mod, i.stderr, options{timeout: limit})
	}
	return int(api.DecodeI32(res[0])), nil
}

func (i *instance) validate(ctx context.Context, in Input, o options) (Result, error) {
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	i.stderr.Reset()
	input := abi.EncodeInput(in)
	res, err := i.alloc.Call(cctx, api.EncodeI32(int32(len(input))))
	if err != nil {
		return Result{}, callError(cctx, err, i.mod, i.stderr, o)
	}
	ptr := uint32(res[0])
	if !i.mod.Memory().Write(ptr, input) {
		return Result{}, fmt.Errorf("%w: pawl_alloc returned %d, outside memory for %d bytes", ErrBadOutput, ptr, len(input))
	}
	res, err = i.validateFn.Call(cctx, api.EncodeI32(int32(ptr)), api.EncodeI32(int32(len(input))))
	if err != nil {
		return Result{}, callError(cctx, err, i.mod, i.stderr, o)
	}
	outPtr, outLen := uint32(res[0]>>32), uint32(res[0])
	if int64(outLen) > int64(o.maxOutput) {
		return Result{}, &LimitError{Limit: LimitOutput, Msg: fmt.Sprintf("output too large: the module returned %d bytes; the limit is %d", outLen, o.maxOutput),
			Max: uint64(o.maxOutput), Got: uint64(outLen)}
	}
	out, ok := i.mod.Memory().Read(outPtr, outLen)
	if !ok {
		return Result{}, fmt.Errorf("%w: result at %d+%d is outside memory", ErrBadOutput, outPtr, outLen)
	}
	var result Result
	if err := json.Unmarshal(out, &result); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBadOutput, err)
	}
	result.Normalize()
	return result, nil
}

// callError classifies a failed call: the deadline, the memory limit, or a
// trap (with what the module wrote to stderr).
func callError(ctx context.Context, err error, mod api.Module, stderr *limitedBuffer, o options) error {
	var exit *sys.ExitError
	if errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		(errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded) {
		return &TimeoutError{Limit: o.timeout}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	detail := strings.TrimSpace(stderr.String())
	outOfMemory := strings.Contains(detail, "out of memory")
	if mod != nil && o.memoryLimit > 0 {
		if mem := mod.Memory(); mem != nil && int(mem.Size())+wasmPageSize > o.memoryLimit {
			outOfMemory = true
		}
	}
	if outOfMemory {
		return &LimitError{Limit: LimitMemory, Msg: fmt.Sprintf("memory limit exceeded: the module needed more than %d MiB", o.memoryLimit>>20), Max: uint64(o.memoryLimit)}
	}
	return &TrapError{Cause: err, Detail: detail}
}

// virtualClock is an instance's monotonic clock. It does not follow the
// machine: it advances one nanosecond per reading (the Go runtime insists
// that time moves) and, when the module sleeps, by the time slept, at once.
// A module waiting on a timer therefore never spins or blocks, and what it
// reads depends only on what it did.
type virtualClock struct{ now atomic.Int64 }

func (c *virtualClock) nanotime() int64    { return c.now.Add(1) }
func (c *virtualClock) nanosleep(ns int64) { c.now.Add(max(ns, 0)) }

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func (b *limitedBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = b.buf[:0]
}
