// Command pawl is the Pawl command-line client.
//
//	pawl put /payments/limits.json --file limits.json
//	pawl get /payments/limits.json
//	pawl ls /payments/
//	pawl watch /payments/ --from-revision 42
//	pawl del /payments/limits.json --expect-revision 43
//
// The server is --server, or $PAWL_SERVER, or http://127.0.0.1:7070. Every
// command takes -o json for machine-readable output, and exits non-zero with
// the server's message when a call fails. watch reconnects by itself when
// the server restarts (--no-retry to exit, naming the revision to resume
// from); promote --wait and rollout status --watch follow a rollout until
// it is done. --version names the build; completion prints a shell
// completion script.
//
// Two commands call no server: `pawl validator new --lang go|rust|assemblyscript
// NAME` writes a starting validator project, and `pawl validator test
// MODULE.wasm --cases DIR` runs the conformance kit (validators/abitest) on a
// module locally, with the host and limits a server uses.
//
// Every call carries the credentials of --token or --token-file, --ca,
// --cert and --key (or $PAWL_TOKEN, $PAWL_TOKEN_FILE, $PAWL_CA, $PAWL_CERT,
// $PAWL_KEY); a token is never sent in clear text to a server beyond
// loopback. `pawl token create --principal NAME` prints a new token once,
// and the entry of pawld's auth file that holds its hash.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one pawl command line and returns the exit code: 0 on
// success, 1 when the command failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := newRootCommand(stdin, stdout, stderr)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		if errors.Is(err, errInvalid) {
			return 1 // the violations are already printed
		}
		fmt.Fprintln(stderr, "pawl:", err)
		printDetails(stderr, err)
		if isUsage(err) {
			return 2
		}
		return 1
	}
	return 0
}
