package configid_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/sdk/configid"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{"routing", true}, {"a", true}, {"0.9_x-y", true}, {strings.Repeat("a", 128), true}, {"a..", true},
		{"", false}, {".", false}, {"..", false}, {"../../../..", false}, {"a/b", false}, {"/etc", false},
		{".hidden", false}, {"-flag", false}, {"Routing", false}, {"a b", false}, {"a\x00", false}, {"a\n", false},
		{strings.Repeat("a", 129), false}, {"é", false},
	} {
		err := configid.Check(c.id)
		if (err == nil) != c.ok || configid.Valid(c.id) != c.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && !errors.Is(err, configid.ErrInvalid) {
			t.Errorf("Check(%q) = %v, not ErrInvalid", c.id, err)
		}
		if c.ok && (!filepath.IsLocal(c.id) || filepath.Base(c.id) != c.id) {
			t.Errorf("valid %q is not one local path element", c.id)
		}
	}
	for gen, ok := range map[int64]bool{1: true, 1 << 62: true, 0: false, -1: false} {
		if err := configid.CheckGeneration(gen); (err == nil) != ok {
			t.Errorf("CheckGeneration(%d) = %v", gen, err)
		}
	}
}

// FuzzValidIsOnePathElement: whatever passes Check is one local path
// element, so it can never leave the directory it is joined to.
func FuzzValidIsOnePathElement(f *testing.F) {
	for _, s := range []string{"routing", "..", "a/../b", "a\\b", ".x", "a..", strings.Repeat("z", 128)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if configid.Valid(id) && (!filepath.IsLocal(id) || filepath.Base(id) != id || strings.ContainsAny(id, "/\\\x00") || id == "." || id == "..") {
			t.Fatalf("%q is valid but not one local path element", id)
		}
	})
}
