package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/internal/clientflags"
	"github.com/pawlcfg/pawl/internal/flagconf"
	"github.com/pawlcfg/pawl/sdk"
	"github.com/pawlcfg/pawl/sdk/configid"
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
	// fileMode is the mode of every file written under dir; its
	// directories get the same with search bits (atomicfile.DirMode).
	fileMode         os.FileMode
	downloadAttempts int
	// wait is --wait: the quiet period before --exec runs.
	wait waitFlag
	// templates are the --template files, rendered after every batch.
	templates []*tmpl
	// once is --once: write the initial sync, render, run --exec, exit.
	once bool
	// listen is --listen: the local HTTP endpoint's address, or empty.
	listen string
}

// The layout of the directory the agent keeps: each config in one
// directory, the mirrored keys in another, so that no config can collide
// with a key or with the KV directory.
const (
	configsDir = "configs"
	kvDir      = "kv"
)

// defaultFileMode is --file-mode's default: the files are read by an
// application that often runs as another user than the agent, and they
// hold no secret values (releases carry only references to secret
// versions), as consul-template and Vault Agent default to 0644 too. Where
// the application's user shares the agent's group, 0640 is tighter.
const defaultFileMode = 0o644

// run parses args, runs the agent until ctx ends, and returns the exit
// code: 0 after a clean stop, 1 on failure, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		var out printOnly
		if errors.As(err, &out) {
			fmt.Fprint(stdout, out.text)
			return 0
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "pawl-agent:", err)
		return 2
	}
	a := &agent{o: o, out: stdout, log: slog.New(slog.NewTextHandler(stderr, nil)), execErr: map[string]error{},
		awaiting: map[string]bool{}, execRan: make(chan struct{}), dirty: make(chan struct{}, 1), configs: map[string]*sdk.Snapshot{}}
	if err := a.run(ctx); err != nil {
		fmt.Fprintln(stderr, "pawl-agent:", err)
		return 1
	}
	return 0
}

// printOnly is parse's answer to --version and completion: text to print
// on standard output before exiting 0.
type printOnly struct{ text string }

func (p printOnly) Error() string { return "print only" }

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
	fs.StringVar(&o.prefix, "prefix", "", "a KV prefix to mirror into DIR/kv/ (a prefix without a trailing / gets one: --prefix /flags mirrors /flags/..., never /flagsx)")
	fs.BoolVar(&o.noAssignments, "no-assignments", false, "only mirror --prefix: do not register or follow releases")
	fs.StringVar(&o.execCmd, "exec", "", "a shell command to run once at start and once after each batch of changes (a transaction, a release), with the files written or removed in PAWL_FILES (one a line); a batch of one config also sets PAWL_CONFIG, PAWL_GENERATION and PAWL_FILE")
	fs.Var(&o.wait, "wait", "MIN[,MAX]: run --exec once no change has come for MIN, at most MAX (default 4×MIN) after the first change, as consul-template's -wait (default 0: at once after each batch)")
	fs.DurationVar(&o.execTimeout, "exec-timeout", 30*time.Second, "how long --exec and --health-cmd may run")
	fs.StringVar(&o.healthCmd, "health-cmd", "", "a shell command whose failure reports a release unhealthy: run during its health window and, while its rollout can still stop, every --health-interval after it")
	fs.DurationVar(&o.healthInterval, "health-interval", sdk.DefaultHealthInterval, "how often --health-cmd runs again after a canary's health window, while its rollout can still stop")
	fs.DurationVar(&o.validatorTimeout, "validator-timeout", host.DefaultTimeout, "how long one local validation may run before the release is rejected")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "the last known good state, outside DIR (default $XDG_CACHE_HOME/pawl-agent/NAME-HASH, by DIR's absolute path)")
	fileMode := fs.String("file-mode", fmt.Sprintf("%04o", defaultFileMode), "the mode of every file written under DIR, in octal; directories get the same with search bits (0640: 0750)")
	fs.IntVar(&o.downloadAttempts, "download-attempts", sdk.DefaultDownloadAttempts, "how many times a release that does not match its digests is downloaded before it is rejected")
	fs.StringVar(&o.validatorCache, "validator-cache", "", "compiled validator modules, which agents of one user on a host may share; refused if another user could write it (default CACHE-DIR/compiled)")
	fs.Func("template", "SRC:DEST: render the Go text/template in file SRC to DIR/DEST after every batch, with functions key KEY, keys PREFIX (or ls), config ID, json TEXT and toJSON VALUE; keys under --prefix only (repeatable)", func(v string) error {
		t, err := parseTemplate(v)
		if err == nil {
			o.templates = append(o.templates, t)
		}
		return err
	})
	fs.BoolVar(&o.once, "once", false, "write the initial sync (each --config, every key under --prefix), render the templates, run --exec once, and exit: 0 if all of it succeeded, 1 if not")
	fs.StringVar(&o.listen, "listen", "", "a loopback HOST:PORT to serve the snapshot on (GET /v1/configs/ID, /v1/kv/KEY, /ready, /healthz); off by default")
	creds := clientflags.Register(fs)
	showVersion := fs.Bool("version", false, "print the module version and VCS commit pawl-agent was built from, and exit")
	if len(args) > 0 && args[0] == "completion" {
		if len(args) != 2 {
			return o, errors.New("usage: pawl-agent completion bash|zsh|fish")
		}
		var b strings.Builder
		if err := flagconf.Completion(&b, args[1], "pawl-agent", fs, "completion"); err != nil {
			return o, err
		}
		return o, printOnly{b.String()}
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *showVersion {
		return o, printOnly{flagconf.Version("pawl-agent") + "\n"}
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
	case o.once && !o.noAssignments && len(o.configs) == 0:
		return o, errors.New("--once follows releases only with --config: without it, the agent cannot tell when it has every config assigned")
	case o.once && o.listen != "":
		return o, errors.New("--once and --listen: the endpoint would stop as soon as it started")
	case o.downloadAttempts < 1:
		return o, fmt.Errorf("--download-attempts %d must be at least 1", o.downloadAttempts)
	}
	mode, err := strconv.ParseUint(*fileMode, 8, 32)
	if err != nil || mode&^0o777 != 0 || mode&0o600 != 0o600 {
		return o, fmt.Errorf("--file-mode %q must be octal permission bits (0600 to 0777) that let the agent read and write its files", *fileMode)
	}
	o.fileMode = os.FileMode(mode)
	if o.listen != "" {
		if err := checkListen(o.listen); err != nil {
			return o, err
		}
	}
	for _, id := range o.configs {
		if err := configid.Check(id); err != nil {
			return o, fmt.Errorf("--config: %w", err)
		}
	}
	if o.prefix != "" && !strings.HasSuffix(o.prefix, "/") {
		o.prefix += "/"
	}
	if o.dir, err = filepath.Abs(o.dir); err != nil {
		return o, fmt.Errorf("--dir: %w", err)
	}
	if o.cacheDir == "" {
		if o.cacheDir, err = defaultCacheDir(o.dir); err != nil {
			return o, err
		}
	}
	if o.cacheDir, err = filepath.Abs(o.cacheDir); err != nil {
		return o, fmt.Errorf("--cache-dir: %w", err)
	}
	if inside(o.dir, o.cacheDir) {
		return o, fmt.Errorf("--cache-dir %s is inside --dir %s: the application's directory must not hold the cache it could rewrite", o.cacheDir, o.dir)
	}
	// Through symbolic links too: a link can make two unrelated paths one.
	realDir, err := realPath(o.dir)
	if err != nil {
		return o, fmt.Errorf("--dir: %w", err)
	}
	realCache, err := realPath(o.cacheDir)
	if err != nil {
		return o, fmt.Errorf("--cache-dir: %w", err)
	}
	if inside(realDir, realCache) {
		return o, fmt.Errorf("--cache-dir %s is inside --dir %s through symbolic links (%s is %s, inside %s): the application's directory must not hold the cache it could rewrite",
			o.cacheDir, o.dir, o.cacheDir, realCache, realDir)
	}
	return o, nil
}

// inside reports whether path is dir or under it (both absolute and
// clean), by their names alone.
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// maxLinks bounds the symbolic links realPath follows by hand, as the
// kernel bounds a lookup's (Linux's ELOOP after 40).
const maxLinks = 40

// realPath is the absolute path p names once every symbolic link on the
// way is followed (filepath.EvalSymlinks), also when p does not exist
// yet: the real path of its nearest existing ancestor, followed by the
// rest, where a dangling link on the way counts as where it points.
func realPath(p string) (string, error) {
	links := maxLinks
	return realPathLinks(p, &links)
}

// realPathLinks is realPath, following at most *links more links by
// hand (a cycle through dangling links ends there).
func realPathLinks(p string, links *int) (string, error) {
	for ; *links > 0; *links-- {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p) // a dangling link: where it would lead
			if err != nil {
				return "", err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			p = target
			continue
		}
		parent := filepath.Dir(p)
		if parent == p {
			return p, nil
		}
		realParent, err := realPathLinks(parent, links)
		if err != nil {
			return "", err
		}
		return filepath.Join(realParent, filepath.Base(p)), nil
	}
	return "", fmt.Errorf("%s: more than %d symbolic links", p, maxLinks)
}

// defaultCacheDir is the cache of the agent keeping dir (an absolute
// path): under the user's cache directory ($XDG_CACHE_HOME, else
// ~/.cache), named by dir's last element and a hash of the whole, so that
// agents of different directories never share one.
func defaultCacheDir(dir string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("--cache-dir is needed: there is no default (%w)", err)
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(base, "pawl-agent", filepath.Base(dir)+"-"+hex.EncodeToString(sum[:6])), nil
}

// agent writes what the SDK applies.
type agent struct {
	o   options
	out io.Writer
	log *slog.Logger

	// root is DIR: every file is written and removed through it, so no
	// name and no symbolic link planted in DIR leads outside.
	root *os.Root

	mu           sync.Mutex
	execErr      map[string]error // by config@generation: how --exec ended
	awaiting     map[string]bool  // config@generation written, --exec not yet run after it
	execRan      chan struct{}    // closed, and replaced, after each --exec run
	pendingSnaps []string         // configs written since the last run
	pendingFiles []string         // files written or removed since the last run
	// dirty wakes the --exec runner: something was written.
	dirty chan struct{}
	// configs are the snapshots written, by config: what the templates
	// and the endpoint read, as the files hold them.
	configs map[string]*sdk.Snapshot
	// synced says the initial sync is written (templates included).
	synced bool

	// space is the --prefix space, if any; set before the runner starts.
	space *sdk.Space
}

func (a *agent) run(ctx context.Context) error {
	if err := os.MkdirAll(a.o.dir, atomicfile.DirMode(a.o.fileMode)); err != nil {
		return err
	}
	root, err := os.OpenRoot(a.o.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	a.root = root
	var ln net.Listener
	if a.o.listen != "" {
		if ln, err = net.Listen("tcp", a.o.listen); err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		defer ln.Close()
	}
	if _, err := os.Stat(filepath.Join(a.o.dir, ".pawl-cache")); err == nil {
		a.log.Warn("DIR/.pawl-cache, where an older agent kept its cache, is no longer read: the application's directory must not hold the cache; remove it",
			"old", filepath.Join(a.o.dir, ".pawl-cache"), "cache", a.o.cacheDir)
	}
	opts := []sdk.Option{
		sdk.WithCacheDir(a.o.cacheDir), sdk.WithLogger(a.log),
		sdk.WithAuthToken(a.o.creds.Token), sdk.WithAuthTokenFile(a.o.creds.TokenFile), sdk.WithCAFile(a.o.creds.TLS.CA),
		sdk.WithClientCertificate(a.o.creds.TLS.Cert, a.o.creds.TLS.Key),
		sdk.WithValidatorTimeout(a.o.validatorTimeout), sdk.WithHealthInterval(a.o.healthInterval),
		sdk.WithApplier(a.writeConfig), sdk.WithHealthCheck(a.health), sdk.WithDownloadAttempts(a.o.downloadAttempts),
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
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var m *mirror
	if a.o.prefix != "" {
		space, err := client.Space(ctx, a.o.prefix)
		if err != nil {
			return err
		}
		defer space.Close()
		a.space = space
		m = a.newMirror(space)
		defer m.stop()
		m.sync() // the initial sync
	}
	// a.space is set: the endpoint may read it.
	if ln != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serve(ctx, ln)
		}()
		fmt.Fprintf(a.out, "serving the snapshot on http://%s\n", ln.Addr())
	}
	if a.o.once {
		for _, id := range a.o.configs {
			if _, err := client.Wait(ctx, id); err != nil {
				return fmt.Errorf("--once: waiting for config %s: %w", id, err)
			}
		}
		return a.pass(ctx)
	}
	if m != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.follow(ctx)
		}()
	}
	// --exec runs once for the initial sync, then once per batch.
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.runExec(ctx)
	}()
	<-ctx.Done()
	return nil
}

// writeConfig is the SDK's applier: it replaces DIR/configs/CONFIG, then
// runs --exec; how the command ended becomes the release's health. A
// config ID that is not one (the SDK refuses those first) writes nothing.
func (a *agent) writeConfig(ctx context.Context, s *sdk.Snapshot) error {
	if err := configid.Check(s.Config); err != nil {
		return err
	}
	name := configsDir + "/" + s.Config
	if err := atomicfile.WriteIn(a.root, name, s.Content, a.o.fileMode); err != nil {
		return err
	}
	path := filepath.Join(a.o.dir, filepath.FromSlash(name))
	fmt.Fprintf(a.out, "wrote %s generation %d to %s\n", s.Config, s.Generation, path)
	a.mu.Lock()
	a.configs[s.Config] = s
	a.mu.Unlock()
	a.changed(s.String(), path)
	return nil
}

// health is the SDK's health check, run during each release's health
// window and, for a canary, every --health-interval after it: the outcome
// of the --exec run after this snapshot was written (awaited), then
// --health-cmd.
func (a *agent) health(ctx context.Context, s *sdk.Snapshot) error {
	if err := a.execOutcome(ctx, s.String()); err != nil {
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

// maxNameBytes is the longest file name most file systems take (NAME_MAX).
const maxNameBytes = 255

// keyFile maps a key under prefix (which ends with "/") to its file,
// relative to DIR and slash-separated: kv/ then the rest of the key, as
// is. A key it cannot map one-to-one to a file inside kv/ is refused
// (false): one outside prefix, or whose rest has an empty element (a
// trailing "/" or "//", which would make two keys one file), a "." or
// ".." element, a NUL, an element longer than maxNameBytes, or an element
// named like atomicfile's temporary files. Distinct keys that map give
// distinct files.
func keyFile(prefix, key string) (string, bool) {
	rel, ok := strings.CutPrefix(key, prefix)
	if !ok || rel == "" || !strings.HasSuffix(prefix, "/") {
		return "", false
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "" || part == "." || part == ".." || len(part) > maxNameBytes || strings.ContainsRune(part, 0) || atomicfile.IsTemp(part) {
			return "", false
		}
	}
	return kvDir + "/" + rel, true
}
