package main

import (
	"runtime/debug"
	"testing"
)

// TestVersionString: the module's version from the build information, or
// (devel).
func TestVersionString(t *testing.T) {
	for _, c := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/idem-go/idem/cmd", Version: "v0.1.0"}}, true, "v0.1.0"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/idem-go/idem/cmd", Version: "(devel)"}}, true, "(devel)"},
		{&debug.BuildInfo{}, true, "(devel)"},
		{nil, false, "(devel)"},
	} {
		if got := version(c.info, c.ok); got != c.want {
			t.Errorf("version(%+v, %v) = %q, want %q", c.info, c.ok, got, c.want)
		}
	}
}
