package harness

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// startTimeout bounds starting clusters for a test binary, including the
// one-time control-plane build.
const startTimeout = 20 * time.Minute

// RunWithLocalClusters is a TestMain body: it starts the first n local
// clusters (all of them when n <= 0), hands them to use, runs the tests, stops
// the clusters and returns the exit code.
func RunWithLocalClusters(m *testing.M, n int, use func([]*Cluster)) int {
	flag.Parse()
	specs, err := LocalSpecs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if n > 0 && n < len(specs) {
		specs = specs[:n]
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	clusters, err := StartAll(ctx, specs)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start clusters:", err)
		return 1
	}
	defer StopAll(clusters)
	use(clusters)
	return m.Run()
}
