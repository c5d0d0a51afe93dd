package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/pawlcfg/pawl/internal/atomicfile"
	"github.com/pawlcfg/pawl/sdk"
)

// tmpl is one --template SRC:DEST: a Go text/template read from SRC,
// rendered to DEST (relative to DIR, slash-separated) after every batch.
type tmpl struct {
	src, dest string
	t         *template.Template
	last      []byte // what DEST holds, as last rendered; nil before
}

// parseTemplate parses one --template value: SRC a readable template file,
// DEST a path inside DIR, outside configs/ and kv/ (whose files the agent
// writes itself).
func parseTemplate(v string) (*tmpl, error) {
	src, dest, ok := strings.Cut(v, ":")
	if !ok || src == "" || dest == "" {
		return nil, fmt.Errorf("--template %q is not SRC:DEST", v)
	}
	dest = filepath.ToSlash(filepath.Clean(dest))
	if !filepath.IsLocal(dest) {
		return nil, fmt.Errorf("--template %q: DEST must be a relative path inside --dir", v)
	}
	if top, _, _ := strings.Cut(dest, "/"); top == configsDir || top == kvDir {
		return nil, fmt.Errorf("--template %q: DEST must not be under %s/ or %s/, which hold configs and keys", v, configsDir, kvDir)
	}
	if atomicfile.IsTemp(path.Base(dest)) {
		return nil, fmt.Errorf("--template %q: DEST is named like a temporary file", v)
	}
	text, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("--template: %w", err)
	}
	t, err := template.New(filepath.Base(src)).Option("missingkey=error").Funcs(templateFuncs(nil)).Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("--template %s: %w", src, err)
	}
	return &tmpl{src: src, dest: dest, t: t}, nil
}

// KV is a key and its value, as the keys function lists them.
type KV struct {
	// Key is the whole key.
	Key string
	// Value is its value.
	Value string
}

// view is what one render reads: the configs written and the keys
// mirrored, each at one moment.
type view struct {
	prefix  string
	configs map[string]*sdk.Snapshot
	space   *sdk.Space
	entries []sdk.Entry // read once, at the first key function
}

// templateFuncs are the template functions on v (nil: only their names,
// for parsing).
func templateFuncs(v *view) template.FuncMap {
	ls := func(prefix string) ([]KV, error) {
		es, err := v.keys(prefix)
		if err != nil {
			return nil, err
		}
		out := make([]KV, 0, len(es))
		for _, e := range es {
			if strings.HasPrefix(e.Key, prefix) {
				out = append(out, KV{Key: e.Key, Value: string(e.Value)})
			}
		}
		return out, nil
	}
	return template.FuncMap{
		"key": func(key string) (string, error) {
			es, err := v.keys(key)
			if err != nil {
				return "", err
			}
			for _, e := range es {
				if e.Key == key {
					return string(e.Value), nil
				}
			}
			return "", fmt.Errorf("key %s does not exist", key)
		},
		"keys": ls,
		"ls":   ls,
		"config": func(id string) (string, error) {
			s := v.configs[id]
			if s == nil {
				return "", fmt.Errorf("config %s has no snapshot yet", id)
			}
			return string(s.Content), nil
		},
		"json": func(s string) (any, error) {
			var out any
			if err := json.Unmarshal([]byte(s), &out); err != nil {
				return nil, fmt.Errorf("json: %w", err)
			}
			return out, nil
		},
		"toJSON": func(x any) (string, error) {
			b, err := json.Marshal(x)
			return string(b), err
		},
	}
}

// keys are the mirrored entries, for a key or prefix under --prefix.
func (v *view) keys(under string) ([]sdk.Entry, error) {
	if v.space == nil {
		return nil, fmt.Errorf("%s: templates read keys only under --prefix, and there is none", under)
	}
	if !strings.HasPrefix(under, v.prefix) {
		return nil, fmt.Errorf("%s is not under --prefix %s, the keys the agent follows", under, v.prefix)
	}
	if v.entries == nil {
		v.entries, _ = v.space.Entries()
	}
	return v.entries, nil
}

// render renders every template and writes those whose output changed;
// it returns the paths written, and an error naming each template that
// failed (its file is left as it was).
func (a *agent) render() ([]string, error) {
	if len(a.o.templates) == 0 {
		return nil, nil
	}
	a.mu.Lock()
	configs := make(map[string]*sdk.Snapshot, len(a.configs))
	for id, s := range a.configs {
		configs[id] = s
	}
	a.mu.Unlock()
	v := &view{prefix: a.o.prefix, configs: configs, space: a.space}
	var written []string
	var errs []error
	for _, t := range a.o.templates {
		var b bytes.Buffer
		if err := template.Must(t.t.Clone()).Funcs(templateFuncs(v)).Execute(&b, nil); err != nil {
			errs = append(errs, fmt.Errorf("rendering --template %s: %w", t.src, err))
			continue
		}
		if t.last != nil && bytes.Equal(t.last, b.Bytes()) {
			continue
		}
		if err := atomicfile.WriteIn(a.root, t.dest, b.Bytes(), a.o.fileMode); err != nil {
			errs = append(errs, fmt.Errorf("writing --template %s: %w", t.src, err))
			continue
		}
		t.last = bytes.Clone(b.Bytes())
		p := filepath.Join(a.o.dir, filepath.FromSlash(t.dest))
		fmt.Fprintf(a.out, "rendered %s to %s\n", t.src, p)
		written = append(written, p)
	}
	return written, errors.Join(errs...)
}
