// Command pawld is the Pawl server. With no flags it listens on
// 127.0.0.1:7070 and keeps its embedded store in ./pawl-data:
//
//	go run ./cmd/pawld
//
// It serves Connect, gRPC and gRPC-Web on one port, with gRPC health
// checking and reflection, and stops gracefully on SIGINT or SIGTERM.
//
// Without --auth-file it is open: every caller may do everything, so it
// listens only on loopback unless --insecure says otherwise. With
// --auth-file every call needs a bearer token or a client certificate
// (--tls-client-ca) that the file grants it; SIGHUP reads the file again
// (docs/AUTH.md).
//
// Every flag may also come from a PAWL_* environment variable (PAWL_DATA_DIR
// for --data-dir) or a config file (--config FILE: "flag-name: value" lines);
// flags win over the environment, which wins over the file
// (internal/flagconf). --version names the build, and
// `pawld completion bash|zsh|fish` prints a completion script.
//
// `pawld restore FILE --data DIR` creates a data directory from a snapshot
// that `pawl snapshot save` wrote, and exits:
//
//	go run ./cmd/pawld restore backup.db --data ./pawl-data-restored
//	go run ./cmd/pawld --data ./pawl-data-restored
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pawlcfg/pawl/internal/flagconf"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/validators/host"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "pawld:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "restore" {
		return restore(ctx, args[1:], stderr)
	}
	if len(args) > 0 && args[0] == compileCommand {
		// Hidden: the child that compiles one validator (compileProcess).
		if code := host.RunCompileProcess(args[1:], os.Stdin, stderr); code != 0 {
			return exitCode(code)
		}
		return nil
	}
	fs := flag.NewFlagSet("pawld", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7070", "address to serve Connect, gRPC and gRPC-Web on")
	data := fs.String("data", server.DefaultDataDir, "data directory of the embedded store (with --store, of the validator cache only)")
	fs.StringVar(data, "data-dir", server.DefaultDataDir, "the same as --data")
	config := fs.String("config", "", "read settings from this file (env PAWL_CONFIG): one \"flag-name: value\" per line, as a flat YAML mapping; flags, then PAWL_* environment variables (PAWL_DATA_DIR for --data-dir), then the file, then the defaults")
	showVersion := fs.Bool("version", false, "print the module version and VCS commit pawld was built from, and exit")
	storeURL := fs.String("store", "", "keep the data in Redis at this URL (redis://host:port/db, rediss://, redis+sentinel://h1,h2/master, redis+cluster://h1,h2) instead of the embedded store: replicas given the same URL and prefix serve the same data")
	redisPrefix := fs.String("redis-prefix", server.DefaultRedisPrefix, "prefix of the store's keys in Redis")
	replicaAcks := fs.Int("redis-replica-acks", 0, "with --store, acknowledge a write only once this many Redis replicas have it (WAIT), so that a failover cannot lose it (count every replica a failover may promote)")
	replicaWait := fs.Duration("redis-replica-wait", time.Second, "how long a write waits for --redis-replica-acks before it fails with UNAVAILABLE")
	acceptRollback := fs.Bool("redis-accept-rollback", false, "with --store, accept that Redis went back in time (a replica found it, and writes are refused until then): continue from what Redis holds, past every revision handed out, and make every watcher take a snapshot; logged and audited")
	waitAOF := fs.Bool("redis-wait-aof", false, "with --store, acknowledge a write only once Redis fsynced it to its append-only file (WAITAOF, Redis 7.2+), waiting at most --redis-replica-wait")
	workLease := fs.Duration("work-lease", server.DefaultWorkLease, "with --store, how long a replica's lease on the rollout supervisor and compaction lasts; another replica takes over within it when the holder dies")
	maxValue := fs.Int("max-value-bytes", server.DefaultMaxValueBytes, "largest value a put accepts, in bytes")
	maxTxnOps := fs.Int("max-txn-ops", server.DefaultMaxTxnOps, "most changes one transaction may make")
	maxText := fs.Int("max-text-bytes", server.DefaultMaxTextBytes, "longest string any request field may hold (reasons, names, labels, selectors...), in bytes; at least the default")
	maxTxnBytes := fs.Int("max-txn-bytes", server.DefaultMaxTxnBytes, "most bytes of keys and values one transaction may carry")
	quotaBytes := fs.Int64("quota-bytes", server.DefaultQuotaBytes, "storage quota in bytes (0: none): over it, writes that add bytes are refused with RESOURCE_EXHAUSTED and the NOSPACE alarm is raised until deletes and compaction take the store under nine tenths of it; reads, deletes and compaction still work, and reports may use a tenth more. Give every replica of a Redis store the same quota")
	retainRevs := fs.Int64("retain-revisions", server.DefaultRetainRevisions, "revisions kept in the change log (0: no count limit)")
	retainLog := fs.Int64("retain-log-revisions", server.DefaultRetainLogRevisions, "revisions of any kind, instances' ACKs included, kept in the change log at most (0: no limit); ACKs do not count toward --retain-revisions")
	retainFor := fs.Duration("retain-for", server.DefaultRetainFor, "age after which change-log revisions are compacted (0: no age limit)")
	progress := fs.Duration("progress-interval", server.DefaultProgressInterval, "how often idle watch streams get a progress notification")
	maxValidator := fs.Int("max-validator-bytes", server.DefaultMaxValidatorBytes, "largest validator module an upload accepts, in bytes")
	validatorTimeout := fs.Duration("validator-timeout", server.DefaultValidatorTimeout, "time limit of one validation")
	validatorMemory := fs.Int("validator-memory-bytes", server.DefaultValidatorMemory, "memory limit of one validator instance, a multiple of 65536")
	validatorBudget := fs.Int("validator-memory-budget", server.DefaultValidatorMemoryBudget, "memory of all validator instances together, in bytes: at most this over --validator-memory-bytes instances exist at once")
	compileTimeout := fs.Duration("validator-compile-timeout", server.DefaultValidatorCompileTimeout, "time limit of one validator module's compilation")
	maxCompiles := fs.Int("validator-max-compiles", 0, "validator modules compiled at once (0: half the cores, at least 1); an upload beyond waits up to --validator-compile-timeout")
	lim := server.DefaultValidatorModuleLimits
	fs.IntVar(&lim.Functions, "validator-max-functions", lim.Functions, "most functions a validator module may define (0: no limit)")
	fs.IntVar(&lim.FunctionLocals, "validator-max-function-locals", lim.FunctionLocals, "most locals one function of a validator module may declare (0: no limit)")
	fs.IntVar(&lim.Locals, "validator-max-locals", lim.Locals, "most locals all functions of a validator module may declare together (0: no limit)")
	fs.IntVar(&lim.FunctionBytes, "validator-max-function-bytes", lim.FunctionBytes, "largest function body of a validator module, in bytes (0: no limit)")
	fs.IntVar(&lim.CodeBytes, "validator-max-code-bytes", lim.CodeBytes, "largest code section of a validator module, in bytes (0: no limit)")
	fs.IntVar(&lim.LoopDepth, "validator-max-loop-depth", lim.LoopDepth, "deepest nesting of loops in one function of a validator module (0: no limit)")
	fs.IntVar(&lim.LoopJoins, "validator-max-loop-joins", lim.LoopJoins, "most loops times locals (parameters included) of one function of a validator module: what makes compilation slow (0: no limit)")
	fs.IntVar(&lim.Blocks, "validator-max-blocks", lim.Blocks, "most blocks (block, loop, if, else, br_if and br_table targets) of one function of a validator module: compilation time grows with their square (0: no limit)")
	fs.IntVar(&lim.BlockJoins, "validator-max-block-joins", lim.BlockJoins, "most blocks times locals (parameters included) of one function of a validator module (0: no limit)")
	instanceLease := fs.Duration("instance-lease", server.DefaultInstanceLease, "how long a registration or heartbeat keeps an instance live")
	validatorCache := fs.String("validator-cache", "", "compilation cache of validators (default: wasm-cache in the data directory)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate file; with --tls-key, serve TLS")
	tlsKey := fs.String("tls-key", "", "PEM private key file for --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "PEM CA certificates that client certificates must chain to; a verified certificate's URI SAN (SPIFFE ID), else its subject, is its principal in the auth file's certificates section (needs --tls-cert and --auth-file)")
	authFile := fs.String("auth-file", "", "YAML file of bearer token hashes and certificate principals with their grants (docs/AUTH.md); read again on SIGHUP. Without it every caller may do everything, and pawld listens only on loopback")
	insecure := fs.Bool("insecure", false, "without --auth-file, listen beyond loopback all the same: anyone who can reach the port may do everything")
	readHeaderTimeout := fs.Duration("read-header-timeout", server.DefaultReadHeaderTimeout, "how long a client has to send a request's headers (and its TLS handshake) once connected or answered; a slower one is cut")
	readTimeout := fs.Duration("read-timeout", server.DefaultReadTimeout, "how long a client has to send a request's body once its headers arrived; a slower one is cut (a stream lives on once its request arrived)")
	idleTimeout := fs.Duration("idle-timeout", server.DefaultIdleTimeout, "how long a connection may carry no request and no stream before it is closed")
	maxConns := fs.Int("max-conns", 0, "most connections open at once, besides --reserved-conns (0: the limit of open files, RLIMIT_NOFILE, less 256 kept for the store, the audit log and the Redis pool, less --reserved-conns); over it a connection is closed at once")
	maxConnsPerAddr := fs.Int("max-conns-per-address", server.DefaultMaxConnsPerAddress, "most connections one remote address outside --admin-networks may hold open (0: no limit but --max-conns); behind a proxy, set 0 and limit at the proxy")
	reservedConns := fs.Int("reserved-conns", server.DefaultReservedConns, "connections beyond --max-conns that only --admin-networks may open, so that an operator and health checks get in when a flood took every other slot")
	adminNetworks := fs.String("admin-networks", "127.0.0.0/8,::1/128", "comma-separated networks (CIDR) whose connections may use --reserved-conns and have no per-address limit; empty for none")
	maxStreams := fs.Int("max-streams-per-principal", server.DefaultMaxStreamsPerPrincipal, "most streams (watches, downloads, snapshots) one principal, or one address without --auth-file, may hold open (0: no limit); admins are exempt")
	maxSessionWatches := fs.Int("max-session-watches", server.DefaultMaxSessionWatches, "most watches one instance's session may hold open (0: no limit); a watch over it is refused in the session, which goes on")
	maxWatchers := fs.Int("max-watchers-per-principal", server.DefaultMaxWatchersPerPrincipal, "most watch streams (KV and assignment watches) one principal, or one address without --auth-file, may hold open (0: no limit); admins are exempt")
	var corsOrigins flagconf.List
	fs.Var(&corsOrigins, "cors-origin", "let pages of this origin (scheme://host[:port], exact) call pawld from a browser; repeat it or separate origins with commas; \"*\" alone allows every origin, without credentials. Off by default (the console at /ui is same-origin)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	otlpEndpoint := fs.String("otlp-endpoint", "", "trace every call and export the spans over OTLP/gRPC to the collector at this URL: http://host:4317 (plaintext) or https://host:4317 (TLS); off by default. An ACK's span continues the SDK's trace")
	metricsAuth := fs.Bool("metrics-auth", false, "answer /metrics only with a bearer token or client certificate of --auth-file (any principal); without it /metrics is open, as etcd's and Consul's are. /healthz and /readyz stay open")
	pprofAddr := fs.String("pprof", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off by default")
	if len(args) > 0 && args[0] == "completion" {
		if len(args) != 2 {
			return errors.New("usage: pawld completion bash|zsh|fish")
		}
		return flagconf.Completion(stdout, args[1], "pawld", fs, "restore", "completion")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q; pawld takes only flags, or the command restore or completion (see pawld -h)", fs.Args())
	}
	if *showVersion {
		_, err := fmt.Fprintln(stdout, flagconf.Version("pawld"))
		return err
	}
	configPath := *config
	if configPath == "" {
		configPath = os.Getenv("PAWL_CONFIG")
	}
	if err := flagconf.Load(fs, configPath, os.Getenv, flagconf.Options{
		Skip: []string{"config", "version"}, Aliases: map[string]string{"data-dir": "data"},
	}); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	admins, err := parseNetworks(*adminNetworks)
	if err != nil {
		return err
	}
	var extraOpts []server.Option
	if *metricsAuth {
		extraOpts = append(extraOpts, server.WithMetricsAuth())
	}
	if *acceptRollback {
		extraOpts = append(extraOpts, server.WithRedisAcceptRollback())
	}
	if *waitAOF {
		extraOpts = append(extraOpts, server.WithRedisWaitAOF(*replicaWait))
	}
	srv, err := server.New(ctx, append([]server.Option{
		server.WithDataDir(*data),
		server.WithStore(*storeURL),
		server.WithRedisPrefix(*redisPrefix),
		server.WithWorkLease(*workLease),
		server.WithRedisReplicaAcks(*replicaAcks, *replicaWait),
		server.WithMaxValueBytes(*maxValue),
		server.WithMaxTextBytes(*maxText),
		server.WithTxnLimits(*maxTxnOps, *maxTxnBytes),
		server.WithRetention(*retainRevs, *retainFor),
		server.WithQuota(*quotaBytes),
		server.WithLogRetention(*retainLog),
		server.WithProgressInterval(*progress),
		server.WithMaxValidatorBytes(*maxValidator),
		server.WithValidatorTimeout(*validatorTimeout),
		server.WithValidatorCacheDir(*validatorCache),
		server.WithValidatorMemoryLimit(*validatorMemory),
		server.WithValidatorMemoryBudget(*validatorBudget),
		server.WithValidatorCompileTimeout(*compileTimeout),
		server.WithValidatorMaxCompiles(*maxCompiles),
		server.WithValidatorCompileProcess(compileProcess()...),
		server.WithValidatorModuleLimits(lim),
		server.WithInstanceLease(*instanceLease),
		server.WithTLS(*tlsCert, *tlsKey),
		server.WithTLSClientCA(*tlsClientCA),
		server.WithAuthFile(*authFile),
		server.WithTimeouts(*readHeaderTimeout, *readTimeout, *idleTimeout),
		server.WithConnLimits(*maxConns, *maxConnsPerAddr, *reservedConns),
		server.WithAdminNetworks(admins...),
		server.WithStreamLimits(*maxStreams, *maxWatchers),
		server.WithMaxSessionWatches(*maxSessionWatches),
		server.WithCORSOrigins(corsOrigins...),
		server.WithLogger(log),
		server.WithOTLPEndpoint(*otlpEndpoint),
	}, extraOpts...)...)
	if err != nil {
		return err
	}
	defer srv.Close()
	if *pprofAddr != "" {
		stopProfiles, err := serveProfiles(*pprofAddr, log)
		if err != nil {
			return err
		}
		defer stopProfiles()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	defer ln.Close()
	if err := checkExposure(log, ln.Addr(), *listen, *authFile != "", *tlsCert != "", *insecure); err != nil {
		return err
	}
	stopReload := reloadOnHangup(srv, log)
	defer stopReload()
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	}
	where := []any{"data", *data}
	if *storeURL != "" {
		where = []any{"store", *storeURL, "redis_prefix", *redisPrefix}
	}
	log.Info("pawld listening", append([]any{"addr", ln.Addr().String(), "url", scheme + "://" + ln.Addr().String()}, append(where, "max_conns", srv.ConnStats().Limit)...)...)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	if err := srv.Close(); err != nil {
		return err
	}
	log.Info("pawld stopped")
	return nil
}

// checkExposure refuses to serve an open server (no auth file) beyond
// loopback without --insecure, says at start who may call, and warns when
// what reaches beyond loopback travels in clear text.
func checkExposure(log *slog.Logger, addr net.Addr, listen string, authenticated, tls, insecure bool) error {
	tcp, _ := addr.(*net.TCPAddr)
	loopback := tcp != nil && tcp.IP.IsLoopback()
	switch {
	case !authenticated && !loopback && !insecure:
		return fmt.Errorf("--listen %s reaches beyond loopback, and without --auth-file anyone who can reach it may read, write, release and promote anything; "+
			"give --auth-file (docs/AUTH.md), or --insecure to serve it open all the same", listen)
	case !authenticated && loopback:
		log.Info("no --auth-file: every caller is principal anonymous and may do everything; listening on loopback only")
	case !authenticated:
		log.Warn("no --auth-file, and --insecure: every caller that can reach the port may do everything", "addr", addr.String())
	default:
		log.Info("every call needs a credential of the auth file; SIGHUP reads it again")
	}
	if !tls && !loopback {
		log.Warn("serving without TLS beyond loopback: bearer tokens, config values, release contents, validator modules and ACKs travel in clear text; give --tls-cert and --tls-key",
			"addr", addr.String())
	}
	return nil
}

// reloadOnHangup reads the auth file again on every SIGHUP, until the
// returned function stops it; a bad file is logged and the one in use
// stays.
func reloadOnHangup(srv *server.Server, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if !srv.Authenticated() {
					log.Info("SIGHUP: there is no --auth-file to read again")
					continue
				}
				_ = srv.ReloadAuth() // it logs the outcome
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-finished
	}
}

// restore runs `pawld restore FILE --data DIR`: flags may come before or
// after FILE.
func restore(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("pawld restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pawld restore FILE --data DIR\n\nCreates the data directory DIR (absent or empty) of the embedded store from a snapshot\nthat pawl snapshot save wrote, after checking its checksum. The store keeps the\nsnapshot's revisions and gets a new incarnation. Then start pawld --data DIR.")
		fs.PrintDefaults()
	}
	data := fs.String("data", server.DefaultDataDir, "data directory to create; it must be absent or empty")
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) != 1 {
		fs.Usage()
		return fmt.Errorf("restore takes one snapshot file, got %d", len(files))
	}
	r, err := server.Restore(ctx, files[0], *data)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "restored %s into %s: revision %d, compact revision %d, new incarnation %s\n",
		files[0], *data, r.Revision, r.CompactRevision, r.Incarnation)
	return nil
}

// parseNetworks reads --admin-networks: CIDRs separated by commas, or a
// bare address for one host.
func parseNetworks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if addr, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("--admin-networks: %q is neither a network (127.0.0.0/8) nor an address", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// serveProfiles serves net/http/pprof on addr, apart from the API, until
// the returned function stops it.
func serveProfiles(addr string, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof server stopped", "error", err)
		}
	}()
	log.Info("profiles served", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// compileCommand is the hidden command of the child that compiles one
// validator module: pawld compiles each module in a re-execution of itself,
// which the compile timeout, a cancelled upload and shutdown kill at once
// (host.WithCompileProcess).
const compileCommand = "__compile-validator"

// compileProcess is the argv of pawld's compile process: this executable
// with compileCommand, or none (compiling in process) when the executable
// cannot be found.
func compileProcess() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{exe, compileCommand}
}

// exitCode is an error that makes pawld exit with the code, saying nothing
// more (the compile process already wrote its reason to stderr).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
