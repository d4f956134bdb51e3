// Package repo finds the repository's checkout, whose files the tests and
// make run's programs read (environments/, deploy/, test/tools/, docs).
package repo

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
)

// module is the module whose go.mod marks the checkout's root.
const module = "github.com/dcm-project/storage-gateway"

// Root is the checkout's root: the nearest directory at or above the
// working directory whose go.mod is this module's (a test runs in its
// package's directory, make run's programs in the root). It reads the
// directory, not the source's compiled-in path, which a -trimpath build
// (make's) leaves out. It panics outside a checkout.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for {
		if isRoot(dir) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("not inside a checkout of " + module + ": no go.mod of it at or above the working directory")
		}
		dir = parent
	}
}

// isRoot reports whether dir holds this module's go.mod.
func isRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	lines := bufio.NewScanner(bytes.NewReader(b))
	for lines.Scan() {
		if f := bytes.Fields(lines.Bytes()); len(f) == 2 && string(f[0]) == "module" {
			return string(f[1]) == module
		}
	}
	return false
}
