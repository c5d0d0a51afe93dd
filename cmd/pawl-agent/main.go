// Command pawl-agent keeps a directory of files in step with Pawl, for
// processes not written in Go. It follows the instance's assigned
// releases like the Go SDK (verify, validate with the same Wasm, ACK each
// step) and writes each config to DIR/configs/CONFIG, and/or mirrors every
// key under a KV prefix to DIR/kv/, each file replaced atomically
// (temporary file, fsync, rename, directory fsync) through an os.Root on
// DIR, so a reader never sees a file half-written and no name or planted
// symbolic link leads outside DIR. Its last-known-good cache lives outside
// DIR (--cache-dir). It can render Go text/templates from many keys and
// configs into files of their own (--template SRC:DEST). It writes each
// batch of changes (a transaction, a release) whole, then runs a command
// once (--exec, also once after the initial sync, optionally after a
// quiet period: --wait MIN,MAX); a command that fails makes the instance
// report the release unhealthy, and so does a health command that fails
// during the release's health window or, while the rollout can still
// stop, at any of its reruns after it. --once writes, renders, runs the
// command and exits; --listen serves the snapshot and readiness on a
// loopback address (/v1/configs/ID, /v1/kv/KEY, /ready, /healthz).
//
// Through the SDK it speaks to pawld on one session stream: its
// registration and lease, its assignments, its ACKs and the --prefix
// watch; against an older pawld without sessions it falls back to the
// unary calls and streams by itself. With --no-assignments it speaks for
// no instance, and watches the prefix with KVService.Watch.
//
//	pawl-agent --server http://127.0.0.1:7070 --identity web-1 --zone a --dir /etc/myapp/pawl \
//	    --exec 'systemctl reload myapp'
//	pawl-agent --server http://127.0.0.1:7070 --no-assignments --prefix /flags/ --dir /etc/myapp
//
// It takes the CLI's credentials: --token or --token-file (read again when
// it changes), --ca, --cert and --key, or $PAWL_TOKEN, $PAWL_TOKEN_FILE,
// $PAWL_CA, $PAWL_CERT and $PAWL_KEY; a token is never sent in clear text
// to a server beyond loopback.
//
// It prints one line per file it writes or removes, and exits on SIGINT or
// SIGTERM.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
