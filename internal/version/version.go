// Package version reports which build of the gateway is running. Release
// builds (make build, the container image) stamp the version and the commit
// at link time (-X), since an image's build context holds no .git; a plain
// `go build` in a checkout gets both from what Go records (the module
// version and the VCS stamp). It must not depend on any other package here.
package version

import (
	"runtime/debug"
	"sync"
)

// Version and Commit are set at link time:
//
//	-ldflags "-X github.com/dcm-project/storage-gateway/internal/version.Version=v1.2.3
//	          -X github.com/dcm-project/storage-gateway/internal/version.Commit=<sha>"
var (
	Version = ""
	Commit  = ""
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version"`
}

// Get returns the build information, computed once.
var Get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(Version, Commit, bi)
})

// fromBuild prefers what was stamped at link time and falls back to the
// build info; "dev" stands for a version nobody recorded.
func fromBuild(stampedVersion, stampedCommit string, bi *debug.BuildInfo) Info {
	info := Info{Version: stampedVersion, Commit: stampedCommit}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			modified := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Commit = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if info.Commit != "" && modified {
				info.Commit += "-dirty"
			}
		}
	}
	if info.Version == "" || info.Version == "(devel)" {
		info.Version = "dev"
	}
	return info
}
