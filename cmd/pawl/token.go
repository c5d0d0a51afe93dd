package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/pawlcfg/pawl/sdk/credentials"
	"github.com/pawlcfg/pawl/sdk/textsafe"
)

func tokenCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Make bearer tokens for pawld's auth file (offline: nothing is sent or stored)"}
	cmd.AddCommand(tokenCreateCommand(g), tokenHashCommand(g))
	return cmd
}

// maxPrincipalBytes bounds a principal's name: it is written into every
// record the principal makes. pawld's auth file takes 255.
const maxPrincipalBytes = 255

func tokenCreateCommand(g *globals) *cobra.Command {
	var principal, expires string
	cmd := &cobra.Command{
		Use:   "create --principal NAME [--expires DURATION]",
		Short: "Print a new token on stdout, once, and its auth-file entry (with the token's hash) on stderr",
		Long: `Print a new random token on standard output, once, and on standard error the entry
of pawld's auth file that accepts it: the principal, the token's sha256 hash and its
expiry. The token itself is not stored anywhere; keep it in a secret store, add
grants to the entry, add the entry under tokens: in the auth file, and send pawld
SIGHUP.`,
		Args:        usageArgs(cobra.NoArgs),
		Annotations: map[string]string{offline: "yes"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPrincipal(principal); err != nil {
				return usageError{err}
			}
			var until time.Time
			if cmd.Flags().Changed("expires") {
				d, err := parseLifetime(expires)
				if err != nil {
					return usageError{err}
				}
				until = time.Now().Add(d).UTC().Truncate(time.Second)
			}
			token, err := credentials.NewToken()
			if err != nil {
				return err
			}
			hash := credentials.HashToken(token)
			if g.output == "json" {
				out := map[string]string{"token": token, "principal": principal, "hash": hash}
				if !until.IsZero() {
					out["expires"] = until.Format(time.RFC3339)
				}
				if err := g.printValue(out); err != nil {
					return err
				}
			} else if _, err := fmt.Fprintln(g.stdout, token); err != nil {
				return err
			}
			return printAuthEntry(g.stderr, principal, hash, until)
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", "the principal the token authenticates, recorded as the actor of what it does (required)")
	cmd.Flags().StringVar(&expires, "expires", "", "how long the token is accepted, from now (a Go duration such as 720h, or days such as 90d; default: no expiry)")
	return cmd
}

func tokenHashCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:         "hash",
		Short:       "Read a token on stdin and print the hash pawld's auth file stores for it",
		Args:        usageArgs(cobra.NoArgs),
		Annotations: map[string]string{offline: "yes"},
		RunE: func(_ *cobra.Command, _ []string) error {
			b, err := io.ReadAll(io.LimitReader(g.stdin, 4096))
			if err != nil {
				return fmt.Errorf("read standard input: %w", err)
			}
			token := strings.TrimSpace(string(b))
			if token == "" || strings.ContainsFunc(token, unicode.IsSpace) {
				return usageError{errors.New("give one token on standard input")}
			}
			_, err = fmt.Fprintln(g.stdout, credentials.HashToken(token))
			return err
		},
	}
}

// printAuthEntry writes the auth-file entry of a new token, as YAML with
// comments, so that it can be pasted as it is.
func printAuthEntry(w io.Writer, principal, hash string, expires time.Time) error {
	var b strings.Builder
	b.WriteString("# The token is on standard output, printed this once: it is not stored anywhere, not even\n")
	b.WriteString("# on the server, which keeps only its hash. Add grants to this entry, add it under tokens:\n")
	b.WriteString("# in pawld's auth file (--auth-file), and send pawld SIGHUP:\n")
	fmt.Fprintf(&b, "- principal: %s\n  hash: %s\n", yamlString(principal), hash)
	if !expires.IsZero() {
		fmt.Fprintf(&b, "  expires: %s\n", expires.Format(time.RFC3339))
	}
	b.WriteString("  grants: []   # for example [{role: reader, prefixes: [\"/app/\"]}]\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// plainYAML matches the names that YAML reads back as the same string
// unquoted; yamlString quotes the others.
var plainYAML = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._/@-]*(:[A-Za-z0-9._/@-]+)*$`)

// yamlString writes s as a YAML scalar that reads back as the string s.
func yamlString(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null":
		return strconv.Quote(s)
	}
	if plainYAML.MatchString(s) {
		return s
	}
	return strconv.Quote(s) // a YAML double-quoted scalar: no control characters get this far
}

func checkPrincipal(name string) error {
	switch {
	case name == "":
		return errors.New("--principal is required: the name recorded as the actor of what the token does")
	case len(name) > maxPrincipalBytes:
		return fmt.Errorf("--principal is %d bytes long; the limit is %d", len(name), maxPrincipalBytes)
	case !utf8.ValidString(name):
		return errors.New("--principal is not valid UTF-8")
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("--principal %q begins or ends with white space", name)
	}
	// pawld's auth file takes printable ASCII only: say which character is
	// not, by code point, since a format character (U+200B) is invisible.
	for i, r := range name {
		if r >= 0x20 && r <= 0x7e {
			continue
		}
		kind := textsafe.Breaking(r)
		if kind == "" {
			kind = "not ASCII"
		}
		return fmt.Errorf("--principal %q holds %U (%s) at byte %d; pawld's auth file takes printable ASCII only", name, r, kind, i)
	}
	return nil
}

// parseLifetime reads a positive Go duration, or a whole number of days
// ("90d").
func parseLifetime(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 100*365 {
			return 0, fmt.Errorf("--expires %q: want a duration such as 720h, or 1 to 36500 days such as 90d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("--expires %q: want a duration such as 720h, or days such as 90d", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("--expires %q: must be positive", s)
	}
	return d, nil
}
