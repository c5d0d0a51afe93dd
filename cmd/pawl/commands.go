package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/clientflags"
	"github.com/pawlcfg/pawl/internal/flagconf"
	"github.com/pawlcfg/pawl/sdk/credentials"
)

// DefaultServer is the server pawl talks to without --server or PAWL_SERVER.
const DefaultServer = "http://127.0.0.1:7070"

// usageError marks errors in the command line itself (exit code 2).
type usageError struct{ error }

// usageArgs makes a positional-argument check's error a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// globals are the flags every command shares.
type globals struct {
	server   string
	creds    *clientflags.Flags
	token    credentials.TokenSource // nil: send none
	tls      *tls.Config             // nil: the defaults
	output   string
	protocol string
	timeout  time.Duration
	// progressAfter is how long a long command (release create, validator
	// upload) runs before it says on stderr what it is doing.
	progressAfter time.Duration
	stdin         io.Reader
	stdout        io.Writer
	stderr        io.Writer
	stderrMu      sync.Mutex
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "pawl",
		Short:         "pawl is the command-line client of the Pawl configuration release platform",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch g.output {
			case "text", "json":
			default:
				return usageError{fmt.Errorf("-o %q: want text or json", g.output)}
			}
			switch g.protocol {
			case "connect", "grpc", "grpc-web":
			default:
				return usageError{fmt.Errorf("--protocol %q: want connect, grpc or grpc-web", g.protocol)}
			}
			if g.timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: must be positive", g.timeout)}
			}
			if cmd.Annotations[offline] != "" {
				return nil
			}
			if err := checkServerURL(g.server); err != nil {
				return usageError{err}
			}
			return g.loadCredentials()
		},
	}
	root.Version = flagconf.Version("pawl")
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	server := os.Getenv("PAWL_SERVER")
	if server == "" {
		server = DefaultServer
	}
	root.PersistentFlags().StringVar(&g.server, "server", server, "Pawl server URL (env PAWL_SERVER)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	root.PersistentFlags().StringVar(&g.protocol, "protocol", "connect", "wire protocol: connect, grpc or grpc-web")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", defaultTimeout(), "how long one call to the server may take; watch has none (env PAWL_TIMEOUT)")
	root.PersistentFlags().DurationVar(&g.progressAfter, "progress-after", time.Second, "how long a long command (release create, validator upload) runs before it says on stderr what it is doing")
	creds := flag.NewFlagSet("pawl", flag.ContinueOnError)
	g.creds = clientflags.Register(creds)
	root.PersistentFlags().AddGoFlagSet(creds)
	root.AddCommand(putCommand(g), getCommand(g), delCommand(g), txnCommand(g), lsCommand(g), watchCommand(g),
		validatorCommand(g), validateCommand(g), releaseCommand(g), instancesCommand(g),
		promoteCommand(g), rollbackCommand(g), promotionCommand(g), rolloutCommand(g), tokenCommand(g), auditCommand(g), snapshotCommand(g))
	// pawl completion bash|zsh|fish|powershell (cobra's) calls no server.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			markOffline(c)
		}
	}
	return root
}

// checkServerURL refuses a --server that is not an http:// or https://
// URL with a host, such as "127.0.0.1:7070" without its scheme, which the
// HTTP client would otherwise report as the server being unavailable.
func checkServerURL(server string) error {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--server %q: want an http:// or https:// URL with a host, e.g. %s (env PAWL_SERVER)", server, DefaultServer)
	}
	return nil
}

// markOffline annotates c and its subcommands as calling no server.
func markOffline(c *cobra.Command) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[offline] = "true"
	for _, sub := range c.Commands() {
		markOffline(sub)
	}
}

// offline is the annotation of commands that call no server, and so read
// no credentials.
const offline = "offline"

// loadCredentials reads the credentials the flags and the environment
// name, and refuses a token that would travel in clear text beyond
// loopback.
func (g *globals) loadCredentials() error {
	creds, err := g.creds.Resolve(os.Getenv)
	if err != nil {
		return usageError{err}
	}
	if g.token, err = creds.TokenSource(); err != nil {
		return err
	}
	if g.token != nil {
		if err := credentials.RefuseClearText(strings.TrimSuffix(g.server, "/")); err != nil {
			return usageError{err}
		}
	}
	if g.tls, err = creds.TLS.Config(nil); err != nil {
		return err
	}
	return nil
}

// kv returns a KVService client for the chosen server and protocol.
func (g *globals) kv() pawlv1connect.KVServiceClient {
	client, opts := g.transport()
	return pawlv1connect.NewKVServiceClient(client, strings.TrimSuffix(g.server, "/"), opts...)
}

// transport returns the HTTP client and Connect options for the chosen
// protocol. For gRPC it speaks HTTP/2 without TLS (prior knowledge) to
// http:// URLs, so gRPC works against a plain pawld.
func (g *globals) transport() (*http.Client, []connect.ClientOption) {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	if g.protocol != "connect" {
		// gRPC needs HTTP/2; the Connect protocol is happy on HTTP/1.1.
		protocols = http.Protocols{}
		protocols.SetHTTP2(true)
		protocols.SetUnencryptedHTTP2(true)
	}
	var tr http.RoundTripper = &http.Transport{Protocols: &protocols, ForceAttemptHTTP2: true, TLSClientConfig: g.tls}
	if g.token != nil {
		tr = credentials.Bearer(tr, g.token)
	}
	client := &http.Client{Transport: tr}
	opts := []connect.ClientOption{connect.WithInterceptors(deadlines{server: g.server, timeout: g.timeout, stderr: g.stderr, mu: &g.stderrMu})}
	switch g.protocol {
	case "grpc":
		opts = append(opts, connect.WithGRPC())
	case "grpc-web":
		opts = append(opts, connect.WithGRPCWeb())
	}
	return client, opts
}

// printJSON writes m as one line of JSON, enum values by their short
// names (marshalJSON).
func (g *globals) printJSON(m proto.Message) error {
	b, err := marshalJSON(m)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = fmt.Fprintf(g.stdout, "%s\n", b)
	return err
}

// printValue prints v, which is not a proto message, as one line of JSON
// (encoding/json's form).
func (g *globals) printValue(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = fmt.Fprintf(g.stdout, "%s\n", b)
	return err
}

// printMutation prints a put's or delete's revision, or in JSON the whole
// response.
func (g *globals) printMutation(resp interface {
	proto.Message
	GetRevision() int64
}) error {
	if g.output == "json" {
		return g.printJSON(resp)
	}
	_, err := fmt.Fprintf(g.stdout, "revision %d\n", resp.GetRevision())
	return err
}

func optionalRevision(cmd *cobra.Command, name string, v int64) *int64 {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	return &v
}

func putCommand(g *globals) *cobra.Command {
	var file string
	var expect int64
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Write a value (from VALUE, --file, or standard input with --file -)",
		Args:  usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := readValue(g.stdin, args, file)
			if err != nil {
				return err
			}
			resp, err := g.kv().Put(cmd.Context(), connect.NewRequest(&pawlv1.PutRequest{
				Key:                 args[0],
				Value:               value,
				ExpectedModRevision: optionalRevision(cmd, "expect-revision", expect),
			}))
			if err != nil {
				return err
			}
			return g.printMutation(resp.Msg)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the value from this file (- for standard input)")
	cmd.Flags().Int64Var(&expect, "expect-revision", 0, "write only if the key's mod revision is this (0: only if absent)")
	return cmd
}

func readValue(stdin io.Reader, args []string, file string) ([]byte, error) {
	switch {
	case file != "" && len(args) == 2:
		return nil, usageError{errors.New("give the value either as an argument or with --file, not both")}
	case file == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return b, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read value: %w", err)
		}
		return b, nil
	case len(args) == 2:
		return []byte(args[1]), nil
	}
	return nil, usageError{errors.New("give a VALUE argument or --file")}
}

func getCommand(g *globals) *cobra.Command {
	var revision int64
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print a key's value, at the current revision or --revision N",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.kv().Get(cmd.Context(), connect.NewRequest(&pawlv1.GetRequest{Key: args[0], Revision: revision}))
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(resp.Msg)
			}
			value := resp.Msg.GetKv().GetValue()
			if _, err := g.stdout.Write(value); err != nil {
				return err
			}
			if len(value) == 0 || value[len(value)-1] != '\n' {
				_, err = io.WriteString(g.stdout, "\n")
			}
			return err
		},
	}
	cmd.Flags().Int64Var(&revision, "revision", 0, "read at this past revision (0: current)")
	return cmd
}

func delCommand(g *globals) *cobra.Command {
	var expect int64
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete", "rm"},
		Short:   "Delete a key",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := g.kv().Delete(cmd.Context(), connect.NewRequest(&pawlv1.DeleteRequest{
				Key:                 args[0],
				ExpectedModRevision: optionalRevision(cmd, "expect-revision", expect),
			}))
			if err != nil {
				return err
			}
			return g.printMutation(resp.Msg)
		},
	}
	cmd.Flags().Int64Var(&expect, "expect-revision", 0, "delete only if the key's mod revision is this")
	return cmd
}

func lsCommand(g *globals) *cobra.Command {
	var revision int64
	var pageSize int32
	cmd := &cobra.Command{
		Use:     "ls [PREFIX]",
		Aliases: []string{"list"},
		Short:   "List the keys under a prefix (all pages, read at one revision)",
		Args:    usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			kv := g.kv()
			req := &pawlv1.ListRequest{Prefix: prefix, Revision: revision, PageSize: pageSize}
			for {
				resp, err := kv.List(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				if err := g.printList(resp.Msg); err != nil {
					return err
				}
				if resp.Msg.GetNextPageToken() == "" {
					return nil
				}
				req.PageToken = resp.Msg.GetNextPageToken()
			}
		},
	}
	cmd.Flags().Int64Var(&revision, "revision", 0, "list as of this past revision (0: current)")
	cmd.Flags().Int32Var(&pageSize, "page-size", 0, "keys per request (0: the server's default)")
	return cmd
}

// printList prints one page: in text, one "KEY<TAB>MOD_REVISION<TAB>VALUE"
// line per key; in JSON, one line per page.
func (g *globals) printList(resp *pawlv1.ListResponse) error {
	if g.output == "json" {
		return g.printJSON(resp)
	}
	for _, kv := range resp.GetKvs() {
		if _, err := fmt.Fprintf(g.stdout, "%s\t%d\t%s\n", printable([]byte(kv.GetKey())), kv.GetModRevision(), printable(kv.GetValue())); err != nil {
			return err
		}
	}
	return nil
}

func watchCommand(g *globals) *cobra.Command {
	var from int64
	var progress, noRetry bool
	cmd := &cobra.Command{
		Use:   "watch [PREFIX]",
		Short: "Print every change under a prefix, one line per event, until interrupted; reconnects by itself when the server restarts",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return g.watch(cmd.Context(), prefix, from, progress, noRetry)
		},
	}
	cmd.Flags().Int64Var(&from, "from-revision", 0, "first revision to print (0: changes from now on)")
	cmd.Flags().BoolVar(&progress, "progress", false, "also print progress notifications (text output)")
	cmd.Flags().BoolVar(&noRetry, "no-retry", false, "exit when the stream breaks instead of reconnecting, saying the --from-revision to resume from")
	return cmd
}

// Reconnection backoff of pawl watch: the first wait, and the cap.
const (
	watchRetryFirst = 100 * time.Millisecond
	watchRetryMax   = 5 * time.Second
)

// watchCursor is where a watch resumes: the first revision not yet
// printed (0: from now on) and the store incarnation it followed.
type watchCursor struct {
	next        int64
	incarnation string
}

// errWatchFinal marks a watch error that a reconnect cannot cure (a
// compacted revision, a refused request).
type errWatchFinal struct{ error }

func (e errWatchFinal) Unwrap() error { return e.error }

// watch streams until ctx ends (an interrupt), which is a success. When
// the stream breaks after it started (a server restart, a lost
// connection), it reconnects from the revision after the last one it saw,
// with backoff, unless noRetry: then it exits naming that revision.
func (g *globals) watch(ctx context.Context, prefix string, from int64, progress, noRetry bool) error {
	cur := &watchCursor{next: from}
	wait := watchRetryFirst
	everStarted := false // a server that never answered is an error at once
	for {
		started, err := g.watchOnce(ctx, prefix, cur, progress)
		if ctx.Err() != nil {
			return nil
		}
		everStarted = everStarted || started
		var final errWatchFinal
		if errors.As(err, &final) || !everStarted || !retryableWatch(err) {
			return err
		}
		if noRetry {
			return fmt.Errorf("%w; resume with --from-revision %d", err, cur.next)
		}
		if started {
			wait = watchRetryFirst
		}
		g.stderrMu.Lock()
		fmt.Fprintf(g.stderr, "pawl: watch interrupted (%v); reconnecting from revision %d in %s\n", err, cur.next, wait)
		g.stderrMu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// retryableWatch reports a broken stream that a reconnect may cure: the
// server or the connection went away (Unavailable, or a stream cut
// mid-message), or the server ended the stream cleanly (a graceful stop).
func retryableWatch(err error) bool {
	if errors.Is(err, errWatchEnded) {
		return true
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeAborted:
		return true
	}
	return false
}

// errWatchEnded says the server closed a watch stream without an error.
var errWatchEnded = errors.New("the server ended the watch")

// watchOnce runs one watch stream from cur, moving cur past every
// revision it prints or is told is current. It reports whether the stream
// started (its WatchStarted arrived).
func (g *globals) watchOnce(ctx context.Context, prefix string, cur *watchCursor, progress bool) (bool, error) {
	stream, err := g.kv().Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: prefix, StartRevision: cur.next, Incarnation: cur.incarnation}))
	if err != nil {
		return false, err
	}
	defer stream.Close()
	started := false
	for stream.Receive() {
		msg := stream.Msg()
		if g.output == "json" {
			if err := g.printJSON(msg); err != nil {
				return started, errWatchFinal{err}
			}
		} else if err := printWatchText(g.stdout, msg, progress); err != nil {
			return started, errWatchFinal{err}
		}
		switch kind := msg.GetKind().(type) {
		case *pawlv1.WatchResponse_Started:
			started = true
			cur.incarnation = kind.Started.GetIncarnation()
			cur.next = max(cur.next, kind.Started.GetRevision()+1)
		case *pawlv1.WatchResponse_Events:
			for _, ev := range kind.Events.GetEvents() {
				cur.next = max(cur.next, ev.GetKv().GetModRevision()+1)
			}
		case *pawlv1.WatchResponse_Progress:
			cur.next = max(cur.next, kind.Progress.GetRevision()+1)
		case *pawlv1.WatchResponse_Compacted:
			c := kind.Compacted
			return started, errWatchFinal{fmt.Errorf("revision %d is compacted (oldest retained change: %d); list at revision %d and watch with --from-revision %d",
				max(cur.next, 1), c.GetCompactRevision()+1, c.GetSnapshotRevision(), c.GetSnapshotRevision()+1)}
		}
	}
	if ctx.Err() != nil {
		return started, nil
	}
	if err := stream.Err(); err != nil {
		if !retryableWatch(err) {
			return started, errWatchFinal{err}
		}
		return started, err
	}
	return started, errWatchEnded
}

func printWatchText(w io.Writer, msg *pawlv1.WatchResponse, progress bool) error {
	var err error
	switch kind := msg.GetKind().(type) {
	case *pawlv1.WatchResponse_Stale:
		_, err = fmt.Fprintf(w, "STALE rev=%d %s\n", kind.Stale.GetRevision(), kind.Stale.GetReason())
	case *pawlv1.WatchResponse_Events:
		for _, ev := range kind.Events.GetEvents() {
			kv := ev.GetKv()
			if ev.GetType() == pawlv1.EventType_EVENT_TYPE_DELETE {
				_, err = fmt.Fprintf(w, "DELETE %s rev=%d\n", printable([]byte(kv.GetKey())), kv.GetModRevision())
			} else {
				_, err = fmt.Fprintf(w, "PUT %s rev=%d %s\n", printable([]byte(kv.GetKey())), kv.GetModRevision(), printable(kv.GetValue()))
			}
			if err != nil {
				return err
			}
		}
	case *pawlv1.WatchResponse_Progress:
		if progress {
			_, err = fmt.Fprintf(w, "PROGRESS rev=%d\n", kind.Progress.GetRevision())
		}
	}
	return err
}

// printable returns v (a value or a key) as text when it is one line of
// printable UTF-8, and quoted otherwise, so that each event stays on one
// line and each listing keeps its columns. The server refuses new keys
// with control characters, but a store written before that rule may hold
// some.
func printable(v []byte) string {
	s := string(v)
	if utf8.ValidString(s) && strconv.CanBackquote(s) && !strings.ContainsAny(s, "\n\r\t") {
		return s
	}
	return strconv.Quote(s)
}
