package clusters_test

import (
	"os"
	"testing"

	"github.com/dcm-project/storage-gateway/test/harness"
)

// east is the local-east harness cluster, started once for the package.
var east *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunWithLocalClusters(m, 1, func(c []*harness.Cluster) { east = c[0] }))
}
