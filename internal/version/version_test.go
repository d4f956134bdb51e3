package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"stamped at link time", "v1.2.3", "f00d", vcs, Info{Version: "v1.2.3", Commit: "f00d", GoVersion: "go1.26.8"}},
		{"a plain build in a checkout", "", "", vcs, Info{Version: "dev", Commit: "abc123-dirty", GoVersion: "go1.26.8"}},
		{"go install of a release", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}},
			Info{Version: "v0.2.0", GoVersion: "go1.26.8"}},
		{"no build info", "", "", nil, Info{Version: "dev"}},
	} {
		if got := fromBuild(tc.version, tc.commit, tc.bi); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
