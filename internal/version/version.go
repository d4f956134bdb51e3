// Package version reports which build of the gateway is running. The release
// version is stamped at link time (-X); otherwise the module's build info
// supplies what Go recorded. It must not depend on any other package here.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set at link time: -ldflags "-X github.com/dcm-project/storage-gateway/internal/version.Version=v1.2.3".
var Version = ""

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version"`
}

// Get returns the build information, computed once.
var Get = sync.OnceValue(func() Info {
	info := Info{Version: Version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" || info.Version == "(devel)" {
		info.Version = "dev"
	}
	return info
})
