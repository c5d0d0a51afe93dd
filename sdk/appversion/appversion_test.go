package appversion_test

import (
	"testing"

	"github.com/pawlcfg/pawl/sdk/appversion"
)

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v, min string
		want   bool
	}{
		{"2.1.0", "2.1", true},
		{"2.10", "2.9", true},
		{"2.9", "2.10", false},
		{"v3", "2.99.99", true},
		{"2.1.0-rc.1", "2.1.0", true}, // a pre-release counts as its release
		{"1.9", "2", false},
		{"", "1", false},
		{"garbage", "0", false}, // an unreadable version is never enough
	} {
		min, err := appversion.Parse(c.min)
		if err != nil {
			t.Fatal(err)
		}
		if got := appversion.AtLeast(c.v, min); got != c.want {
			t.Errorf("AtLeast(%q, %q) = %v, want %v", c.v, c.min, got, c.want)
		}
	}
	for _, bad := range []string{"", "v", "1.x", "1.-2"} {
		if _, err := appversion.Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}
