package flagconf

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestVersionNamesTheModuleVersionAndCommit(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/pawlcfg/pawl", Version: "v0.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "ecb138b85ffa83780fca00e68b07a9c34c2ff34d"},
		{Key: "vcs.time", Value: "2026-12-03T20:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionOf("pawld", info), "pawld v0.4.0 (commit ecb138b85ffa83780fca00e68b07a9c34c2ff34d, 2026-12-03T20:00:00Z, modified, go1.26.0)"; got != want {
		t.Fatalf("versionOf = %q, want %q", got, want)
	}
	if got, want := versionOf("pawld", nil), "pawld unknown (commit unknown)"; got != want {
		t.Fatalf("versionOf(nil) = %q, want %q", got, want)
	}
	if got := Version("pawld"); !strings.HasPrefix(got, "pawld ") || !strings.Contains(got, "(commit ") {
		t.Fatalf("Version = %q", got)
	}
}

// flags is a flag set like pawld's: a string with an alias, an int, a
// duration and a bool.
func flags() (*flag.FlagSet, *string, *int, *time.Duration, *bool) {
	fs := flag.NewFlagSet("pawld", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	data := fs.String("data", "./pawl-data", "data directory")
	fs.StringVar(data, "data-dir", "./pawl-data", "the same as --data")
	n := fs.Int("max-value-bytes", 1024, "largest value")
	d := fs.Duration("retain-for", time.Hour, "retention")
	b := fs.Bool("insecure", false, "open")
	fs.String("config", "", "config file")
	return fs, data, n, d, b
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pawld.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var pawldOptions = Options{Skip: []string{"config"}, Aliases: map[string]string{"data-dir": "data"}}

// TestPrecedenceIsFlagsEnvironmentFileDefaults sets each setting in the
// file, some in the environment and one on the command line, and sees
// each come from the highest source that has it.
func TestPrecedenceIsFlagsEnvironmentFileDefaults(t *testing.T) {
	path := writeConfig(t, "# pawld\n---\ndata: /from/file\nmax-value-bytes: 2048   # a comment\nretain-for: \"10m\"\ninsecure: 'true'\n")
	env := map[string]string{"PAWL_DATA_DIR": "/from/env", "PAWL_MAX_VALUE_BYTES": "4096"}
	fs, data, n, d, b := flags()
	if err := fs.Parse([]string{"--max-value-bytes", "8192"}); err != nil {
		t.Fatal(err)
	}
	if err := Load(fs, path, func(k string) string { return env[k] }, pawldOptions); err != nil {
		t.Fatal(err)
	}
	if *data != "/from/env" || *n != 8192 || *d != 10*time.Minute || !*b {
		t.Fatalf("data %q, max-value-bytes %d, retain-for %s, insecure %v", *data, *n, *d, *b)
	}
	// The alias given on the command line beats the other name's variable.
	fs, data, _, _, _ = flags()
	if err := fs.Parse([]string{"--data", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	if err := Load(fs, path, func(k string) string { return env[k] }, pawldOptions); err != nil || *data != "/from/flag" {
		t.Fatalf("Load = %v; data %q, want /from/flag", err, *data)
	}
	// Nothing anywhere: the defaults.
	fs, data, n, _, _ = flags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Load(fs, "", func(string) string { return "" }, pawldOptions); err != nil || *data != "./pawl-data" || *n != 1024 {
		t.Fatalf("Load = %v; data %q, max-value-bytes %d", err, *data, *n)
	}
}

// TestBadSettingsAreErrorsNamingTheLine: an unknown key, a key given
// twice, a line that is no setting, a value the flag refuses, config in
// the file itself, and a bad environment value each fail with where.
func TestBadSettingsAreErrorsNamingTheLine(t *testing.T) {
	cases := []struct{ file, env, want string }{
		{"data: /d\n\nbogus: 1\n", "", `line 3: unknown key "bogus"`},
		{"data: /d\ndata: /e\n", "", "line 2: data is already set on line 1"},
		{"data /d\n", "", `line 1: want "key: value"`},
		{"max-value-bytes: lots\n", "", "line 1: max-value-bytes: invalid value"},
		{"config: other.yaml\n", "", `line 1: unknown key "config"`},
		{"data: \"/d\n", "", "line 1: data: unterminated double quote"},
		{"", "lots", `PAWL_MAX_VALUE_BYTES="lots": --max-value-bytes`},
	}
	for _, c := range cases {
		path := writeConfig(t, c.file)
		fs, _, _, _, _ := flags()
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			if k == "PAWL_MAX_VALUE_BYTES" {
				return c.env
			}
			return ""
		}
		err := Load(fs, path, getenv, pawldOptions)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.file != "" && !strings.Contains(err.Error(), path)) {
			t.Errorf("file %q env %q: Load = %v; want %q", c.file, c.env, err, c.want)
		}
	}
	if err := Load(flag.NewFlagSet("x", flag.ContinueOnError), filepath.Join(t.TempDir(), "absent"), os.Getenv, Options{}); err == nil {
		t.Error("Load of an absent file succeeded")
	}
}

func TestCompletionListsEveryFlag(t *testing.T) {
	fs, _, _, _, _ := flags()
	for shell, want := range map[string][]string{
		"bash": {"complete -o default -F _pawld pawld", "restore --config --data --data-dir --insecure --max-value-bytes --retain-for"},
		"zsh":  {"#compdef pawld", "'--data[data directory]:value:_files'", "'--insecure[open]'", "'1::command:(restore)'"},
		"fish": {"complete -c pawld -l data -r -d 'data directory'", "complete -c pawld -l insecure -d 'open'", "-a restore"},
	} {
		var b strings.Builder
		if err := Completion(&b, shell, "pawld", fs, "restore"); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s completion lacks %q:\n%s", shell, w, b.String())
			}
		}
	}
	if err := Completion(io.Discard, "tcsh", "pawld", fs); err == nil || !strings.Contains(err.Error(), "want bash, zsh or fish") {
		t.Errorf("tcsh completion: %v", err)
	}
}

// TestListIsRepeatableAndCommaSeparated: a List flag given twice, with
// commas, holds every string in order; from the environment the commas
// list them all.
func TestListIsRepeatableAndCommaSeparated(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var l List
	fs.Var(&l, "origin", "")
	if err := fs.Parse([]string{"--origin", "a", "--origin", " b ,c,"}); err != nil {
		t.Fatal(err)
	}
	if l.String() != "a,b,c" {
		t.Fatalf("from flags: %q", l.String())
	}
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	var fromEnv List
	fs.Var(&fromEnv, "origin", "")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PAWL_ORIGIN": "x, y"}
	if err := Load(fs, "", func(k string) string { return env[k] }, Options{}); err != nil || fromEnv.String() != "x,y" {
		t.Fatalf("from the environment: %q, %v", fromEnv.String(), err)
	}
}
