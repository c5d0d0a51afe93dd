package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/internal/clientflags"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/validators/host"
)

// options are the agent's flags.
type options struct {
	server, identity, zone, role, appVersion, artifact string
	weight                                             float64
	labels                                             map[string]string
	configs                                            []string
	dir, prefix, execCmd, healthCmd, cacheDir          string
	validatorCache                                     string
	creds                                              clientflags.Credentials
	noAssignments                                      bool
	execTimeout, validatorTimeout, healthInterval      time.Duration
}

// run parses args, runs the agent until ctx ends, and returns the exit
// code: 0 after a clean stop, 1 on failure, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "pawl-agent:", err)
		return 2
	}
	a := &agent{o: o, out: stdout, log: slog.New(slog.NewTextHandler(stderr, nil)), execErr: map[string]error{}}
	if err := a.run(ctx); err != nil {
		fmt.Fprintln(stderr, "pawl-agent:", err)
		return 1
	}
	return 0
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("pawl-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	o.labels = map[string]string{}
	server := os.Getenv("PAWL_SERVER")
	if server == "" {
		server = "http://127.0.0.1:7070"
	}
	fs.StringVar(&o.server, "server", server, "the Pawl server, or several replicas separated by commas (env PAWL_SERVER)")
	fs.StringVar(&o.identity, "identity", "", "the instance's workload identity (required unless --no-assignments)")
	fs.StringVar(&o.zone, "zone", "", "the instance's zone")
	fs.StringVar(&o.role, "role", "", "the instance's role")
	fs.Float64Var(&o.weight, "weight", 1, "the instance's traffic weight")
	fs.StringVar(&o.appVersion, "app-version", "", "the application's version, compared with releases' minimum")
	fs.StringVar(&o.artifact, "app-artifact", "", "the application build, reported in ACKs")
	fs.Func("label", "a label KEY=VALUE (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("label %q is not KEY=VALUE", v)
		}
		o.labels[k] = val
		return nil
	})
	fs.Func("config", "a config to write (repeatable; default: every config assigned)", func(v string) error {
		o.configs = append(o.configs, v)
		return nil
	})
	fs.StringVar(&o.dir, "dir", "", "the directory to keep in step (required)")
	fs.StringVar(&o.prefix, "prefix", "", "a KV prefix to mirror into DIR/kv/")
	fs.BoolVar(&o.noAssignments, "no-assignments", false, "only mirror --prefix: do not register or follow releases")
	fs.StringVar(&o.execCmd, "exec", "", "a shell command to run after each change (env PAWL_CONFIG, PAWL_GENERATION or PAWL_KEY, PAWL_FILE)")
	fs.DurationVar(&o.execTimeout, "exec-timeout", 30*time.Second, "how long --exec and --health-cmd may run")
	fs.StringVar(&o.healthCmd, "health-cmd", "", "a shell command whose failure reports a release unhealthy: run during its health window and, while its rollout can still stop, every --health-interval after it")
	fs.DurationVar(&o.healthInterval, "health-interval", sdk.DefaultHealthInterval, "how often --health-cmd runs again after a canary's health window, while its rollout can still stop")
	fs.DurationVar(&o.validatorTimeout, "validator-timeout", host.DefaultTimeout, "how long one local validation may run before the release is rejected")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "the last known good state (default DIR/.pawl-cache)")
	fs.StringVar(&o.validatorCache, "validator-cache", "", "compiled validator modules, which agents on one host may share (default CACHE-DIR/compiled)")
	creds := clientflags.Register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.creds, err = creds.Resolve(os.Getenv); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.dir == "":
		return o, errors.New("--dir is required")
	case o.noAssignments && o.prefix == "":
		return o, errors.New("--no-assignments needs --prefix: there would be nothing to do")
	case !o.noAssignments && o.identity == "":
		return o, errors.New("--identity is required to follow releases (or pass --no-assignments)")
	case o.healthInterval <= 0:
		return o, fmt.Errorf("--health-interval %s must be positive", o.healthInterval)
	case o.prefix != "" && !strings.HasPrefix(o.prefix, "/"):
		return o, fmt.Errorf("--prefix %q must start with /", o.prefix)
	}
	if o.cacheDir == "" {
		o.cacheDir = filepath.Join(o.dir, ".pawl-cache")
	}
	return o, nil
}

// agent writes what the SDK applies.
type agent struct {
	o   options
	out io.Writer
	log *slog.Logger

	mu      sync.Mutex
	execErr map[string]error // by config@generation: how --exec ended
}

func (a *agent) run(ctx context.Context) error {
	if err := os.MkdirAll(a.o.dir, 0o755); err != nil {
		return err
	}
	opts := []sdk.Option{
		sdk.WithCacheDir(a.o.cacheDir), sdk.WithLogger(a.log),
		sdk.WithAuthToken(a.o.creds.Token), sdk.WithAuthTokenFile(a.o.creds.TokenFile), sdk.WithCAFile(a.o.creds.TLS.CA),
		sdk.WithClientCertificate(a.o.creds.TLS.Cert, a.o.creds.TLS.Key),
		sdk.WithValidatorTimeout(a.o.validatorTimeout), sdk.WithHealthInterval(a.o.healthInterval),
		sdk.WithApplier(a.writeConfig), sdk.WithHealthCheck(a.health),
	}
	if a.o.validatorCache != "" {
		opts = append(opts, sdk.WithCompiledCacheDir(a.o.validatorCache))
	}
	if a.o.noAssignments {
		opts = append(opts, sdk.WithoutAssignments())
	} else {
		opts = append(opts, sdk.WithWorkloadIdentity(a.o.identity), sdk.WithZone(a.o.zone), sdk.WithRole(a.o.role),
			sdk.WithTrafficWeight(a.o.weight), sdk.WithAppVersion(a.o.appVersion), sdk.WithAppArtifact(a.o.artifact), sdk.WithLabels(a.o.labels))
		if len(a.o.configs) > 0 {
			opts = append(opts, sdk.WithConfigs(a.o.configs...))
		}
	}
	client, err := sdk.New(ctx, a.o.server, opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	if !a.o.noAssignments {
		// What the cache held is in effect already: make the files say so.
		for _, s := range client.Configs() {
			if err := a.writeConfig(ctx, s); err != nil {
				a.log.Warn("writing a cached config failed", "config", s.Config, "error", err)
			}
		}
	}
	if a.o.prefix != "" {
		if err := a.mirror(ctx, client); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// writeConfig is the SDK's applier: it replaces DIR/CONFIG, then runs
// --exec; how the command ended becomes the release's health.
func (a *agent) writeConfig(ctx context.Context, s *sdk.Snapshot) error {
	path := filepath.Join(a.o.dir, s.Config)
	if err := atomicfile.Write(path, s.Content, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "wrote %s generation %d to %s\n", s.Config, s.Generation, path)
	err := a.exec(ctx, a.o.execCmd, "PAWL_CONFIG="+s.Config, fmt.Sprintf("PAWL_GENERATION=%d", s.Generation), "PAWL_FILE="+path)
	a.mu.Lock()
	a.execErr[s.String()] = err
	a.mu.Unlock()
	return nil
}

// health is the SDK's health check, run during each release's health
// window and, for a canary, every --health-interval after it: --exec's
// outcome for this snapshot, then --health-cmd.
func (a *agent) health(ctx context.Context, s *sdk.Snapshot) error {
	a.mu.Lock()
	err := a.execErr[s.String()]
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("--exec after writing %s: %w", s, err)
	}
	if err := a.exec(ctx, a.o.healthCmd, "PAWL_CONFIG="+s.Config, fmt.Sprintf("PAWL_GENERATION=%d", s.Generation)); err != nil {
		return fmt.Errorf("--health-cmd: %w", err)
	}
	return nil
}

// exec runs a shell command with env added, if command is set.
func (a *agent) exec(ctx context.Context, command string, env ...string) error {
	if command == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.o.execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%q: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	a.out.Write(out) // what the command said, after the line about the change
	return nil
}

// mirror keeps DIR/kv/ in step with every key under the prefix.
func (a *agent) mirror(ctx context.Context, client *sdk.Client) error {
	space, err := client.Space(ctx, a.o.prefix)
	if err != nil {
		return err
	}
	root := filepath.Join(a.o.dir, "kv")
	defer space.Close()
	// Changes queue up for one writer, in revision order, so the callback
	// returns at once.
	var pending []sdk.Change
	var pmu sync.Mutex
	wake := make(chan struct{}, 1)
	stop := space.OnChange(func(ch sdk.Change) {
		pmu.Lock()
		pending = append(pending, ch)
		pmu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer stop()
	// The listing holds every change up to rev, including those queued
	// before it was read.
	entries, rev := space.Entries()
	for _, e := range entries {
		a.writeKey(ctx, root, sdk.Change{Key: e.Key, Value: e.Value, Revision: e.ModRevision})
	}
	a.removeStale(root, entries)
	fmt.Fprintf(a.out, "mirrored %d keys under %s at revision %d\n", len(entries), a.o.prefix, rev)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
		pmu.Lock()
		batch := pending
		pending = nil
		pmu.Unlock()
		for _, ch := range batch {
			if ch.Revision <= rev {
				continue // in the first listing
			}
			a.writeKey(ctx, root, ch)
		}
	}
}

// keyPath maps a key under the prefix to its file, refusing keys that
// would leave the directory.
func (a *agent) keyPath(root, key string) (string, bool) {
	rel := strings.TrimPrefix(strings.TrimPrefix(key, a.o.prefix), "/")
	if rel == "" {
		return "", false
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "" || part == "." || part == ".." {
			return "", false
		}
	}
	return filepath.Join(root, filepath.FromSlash(rel)), true
}

func (a *agent) writeKey(ctx context.Context, root string, ch sdk.Change) {
	path, ok := a.keyPath(root, ch.Key)
	if !ok {
		a.log.Warn("a key cannot be a file under the directory; skipped", "key", ch.Key)
		return
	}
	var err error
	if ch.Deleted {
		if err = os.Remove(path); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	} else {
		err = atomicfile.Write(path, ch.Value, 0o644)
	}
	if err != nil {
		a.log.Warn("mirroring a key failed", "key", ch.Key, "error", err)
		return
	}
	if ch.Deleted {
		fmt.Fprintf(a.out, "removed %s at revision %d: %s\n", ch.Key, ch.Revision, path)
	} else {
		fmt.Fprintf(a.out, "wrote %s at revision %d to %s\n", ch.Key, ch.Revision, path)
	}
	if err := a.exec(ctx, a.o.execCmd, "PAWL_KEY="+ch.Key, "PAWL_FILE="+path); err != nil {
		a.log.Warn("--exec after a key change failed", "key", ch.Key, "error", err)
	}
}

// removeStale removes files under root that are no key of entries (keys
// deleted while the agent was away).
func (a *agent) removeStale(root string, entries []sdk.Entry) {
	keep := map[string]bool{}
	for _, e := range entries {
		if p, ok := a.keyPath(root, e.Key); ok {
			keep[p] = true
		}
	}
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || keep[path] || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		if os.Remove(path) == nil {
			fmt.Fprintf(a.out, "removed %s (no longer a key)\n", path)
		}
		return nil
	})
}
