// Package flagconf gives a command built on the standard flag package
// what its users expect besides flags: --version (the module version and
// VCS commit the binary was built from), a shell completion script that
// lists its flags, and settings from a config file and from PAWL_*
// environment variables.
//
// Precedence is flags > environment > config file > defaults: Load sets
// only the flags the command line did not set.
package flagconf

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Version describes the running binary as "NAME VERSION (commit C, TIME,
// modified; GO)": the module version and the VCS commit, time and dirty
// flag that the go command stamped into it (runtime/debug.ReadBuildInfo).
// Parts the build did not record read "unknown".
func Version(name string) string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(name, info)
}

// versionOf is Version for the build info (nil: none).
func versionOf(name string, info *debug.BuildInfo) string {
	version, commit, when, modified, goVersion := "unknown", "unknown", "", false, ""
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		goVersion = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	parts := []string{"commit " + commit}
	if when != "" {
		parts = append(parts, when)
	}
	if modified {
		parts = append(parts, "modified")
	}
	if goVersion != "" {
		parts = append(parts, goVersion)
	}
	return fmt.Sprintf("%s %s (%s)", name, version, strings.Join(parts, ", "))
}

// EnvName is the environment variable of flag name: PAWL_ and the name in
// upper case with dashes as underscores (data-dir: PAWL_DATA_DIR).
func EnvName(name string) string {
	return "PAWL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Options tune Load.
type Options struct {
	// Skip names flags that neither the environment nor the file may set
	// (such as config itself); the file may not name them.
	Skip []string
	// Aliases maps a flag to another that sets the same value (data-dir
	// to data): either one set on the command line counts for both.
	Aliases map[string]string
}

// Load sets every flag of fs that the command line did not set (fs is
// parsed) from its environment variable (EnvName, read with getenv), else
// from the config file at path ("" for none). A key of the file that is
// no flag, a key given twice, a line that is not "key: value", or a value
// the flag refuses is an error naming the file and line; a bad
// environment value is an error naming the variable.
func Load(fs *flag.FlagSet, path string, getenv func(string) string, o Options) error {
	skip := o.Skip
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for alias, canonical := range o.Aliases {
		if set[alias] || set[canonical] {
			set[alias], set[canonical] = true, true
		}
	}
	for _, s := range skip {
		set[s] = true
	}
	if path != "" {
		values, err := ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range values {
			if fs.Lookup(v.Key) == nil || slices.Contains(skip, v.Key) {
				return fmt.Errorf("%s line %d: unknown key %q: the keys are the flag names (see -h)", path, v.Line, v.Key)
			}
			if set[v.Key] || getenv(EnvName(v.Key)) != "" {
				continue // the command line or the environment wins
			}
			if err := fs.Set(v.Key, v.Value); err != nil {
				return fmt.Errorf("%s line %d: %s: invalid value %q: %w", path, v.Line, v.Key, v.Value, err)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		env := EnvName(f.Name)
		if v := getenv(env); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: --%s: %w", env, v, f.Name, serr)
			}
		}
	})
	return err
}

// Value is one "key: value" line of a config file.
type Value struct {
	// Key is a flag name.
	Key string
	// Value is its value, unquoted.
	Value string
	// Line is its line number, from 1.
	Line int
}

// MaxFileBytes bounds a config file: settings, never data.
const MaxFileBytes = 1 << 20

// ReadFile reads a config file: one "key: value" per line (a flat YAML
// mapping; "key = value" is accepted too), blank lines and # comments
// ignored, values optionally in double (Go/YAML escapes) or single quotes.
func ReadFile(path string) ([]Value, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	return Parse(path, io.LimitReader(f, MaxFileBytes+1))
}

// Parse reads a config file's text from r; name names it in errors.
func Parse(name string, r io.Reader) ([]Value, error) {
	var out []Value
	first := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxFileBytes+1)
	size := 0
	for n := 1; sc.Scan(); n++ {
		size += len(sc.Bytes()) + 1
		if size > MaxFileBytes {
			return nil, fmt.Errorf("%s: over %d bytes", name, MaxFileBytes)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || line == "---" {
			continue
		}
		i := strings.IndexAny(line, ":=")
		if i <= 0 {
			return nil, fmt.Errorf("%s line %d: want \"key: value\", got %q", name, n, line)
		}
		key := strings.TrimPrefix(strings.TrimSpace(line[:i]), "--")
		if strings.ContainsAny(key, " \t\"'") {
			return nil, fmt.Errorf("%s line %d: %q is not a flag name", name, n, key)
		}
		value, err := unquote(strings.TrimSpace(line[i+1:]))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %s: %w", name, n, key, err)
		}
		if at, ok := first[key]; ok {
			return nil, fmt.Errorf("%s line %d: %s is already set on line %d", name, n, key, at)
		}
		first[key] = n
		out = append(out, Value{Key: key, Value: value, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// unquote reads a value: "double quoted", 'single quoted', or plain text
// up to a " #" comment.
func unquote(v string) (string, error) {
	switch {
	case strings.HasPrefix(v, `"`):
		end := strings.LastIndex(v, `"`)
		if end == 0 {
			return "", errors.New("unterminated double quote")
		}
		if rest := strings.TrimSpace(v[end+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("text after the quoted value: %q", rest)
		}
		return strconv.Unquote(v[:end+1])
	case strings.HasPrefix(v, "'"):
		end := strings.LastIndex(v, "'")
		if end == 0 {
			return "", errors.New("unterminated single quote")
		}
		if rest := strings.TrimSpace(v[end+1:]); rest != "" && !strings.HasPrefix(rest, "#") {
			return "", fmt.Errorf("text after the quoted value: %q", rest)
		}
		return strings.ReplaceAll(v[1:end], "''", "'"), nil
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	return v, nil
}

// Completion writes a completion script for shell (bash, zsh or fish)
// that completes the flags of fs and the subcommands of the binary name.
func Completion(w io.Writer, shell, name string, fs *flag.FlagSet, subcommands ...string) error {
	type entry struct {
		name, usage string
		isBool      bool
	}
	var flags []entry
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		flags = append(flags, entry{f.Name, shortUsage(f.Usage), ok && b.IsBoolFlag()})
	})
	sort.Slice(flags, func(i, j int) bool { return flags[i].name < flags[j].name })
	fn := "_" + strings.NewReplacer("-", "_").Replace(name)
	var b strings.Builder
	switch shell {
	case "bash":
		words := append([]string{}, subcommands...)
		for _, f := range flags {
			words = append(words, "--"+f.name)
		}
		fmt.Fprintf(&b, "# bash completion for %s: source <(%s completion bash)\n", name, name)
		fmt.Fprintf(&b, "%s() {\n  local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n  COMPREPLY=($(compgen -W %q -- \"$cur\"))\n}\n", fn, strings.Join(words, " "))
		fmt.Fprintf(&b, "complete -o default -F %s %s\n", fn, name)
	case "zsh":
		fmt.Fprintf(&b, "#compdef %s\n# zsh completion for %s: %s completion zsh > \"${fpath[1]}/_%s\"\n_arguments \\\n", name, name, name, name)
		for _, f := range flags {
			arg := ":value:_files"
			if f.isBool {
				arg = ""
			}
			fmt.Fprintf(&b, "  '--%s[%s]%s' \\\n", f.name, zshEscape(f.usage), arg)
		}
		if len(subcommands) > 0 {
			fmt.Fprintf(&b, "  '1::command:(%s)' \\\n", strings.Join(subcommands, " "))
		}
		b.WriteString("  '*::file:_files'\n")
	case "fish":
		fmt.Fprintf(&b, "# fish completion for %s: %s completion fish | source\n", name, name)
		for _, s := range subcommands {
			fmt.Fprintf(&b, "complete -c %s -n __fish_use_subcommand -f -a %s\n", name, s)
		}
		for _, f := range flags {
			req := " -r"
			if f.isBool {
				req = ""
			}
			fmt.Fprintf(&b, "complete -c %s -l %s%s -d %s\n", name, f.name, req, fishQuote(f.usage))
		}
	default:
		return fmt.Errorf("completion %q: want bash, zsh or fish", shell)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shortUsage is a flag's usage up to its first ";" or ".", at most 70
// bytes, on one line.
func shortUsage(u string) string {
	u = strings.Join(strings.Fields(u), " ")
	if i := strings.IndexAny(u, ";("); i > 0 {
		u = strings.TrimSpace(u[:i])
	}
	if len(u) > 70 {
		u = u[:67] + "..."
	}
	return u
}

func zshEscape(s string) string {
	return strings.NewReplacer("'", "'\\''", "[", "(", "]", ")", ":", " ").Replace(s)
}

func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

// List is a flag.Value of strings that a flag may be given many times,
// each time one or more of them separated by commas (--cors-origin a
// --cors-origin b,c); blanks around them are dropped. From the
// environment or a config file, where a flag is given once, the commas
// list them all.
type List []string

// String returns the strings separated by commas.
func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds the comma-separated strings of v.
func (l *List) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
