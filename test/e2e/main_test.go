package e2e

import (
	"os"
	"testing"

	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
)

// clusters are the two local harness clusters (east, west), shared by the
// scenarios (test/makerun runs `make run` with clusters of its own).
var clusters []*harness.Cluster

func TestMain(m *testing.M) {
	code := harness.RunWithLocalClusters(m, 0, func(c []*harness.Cluster) { clusters = c })
	gatewayproc.Cleanup() // the binary the restart test built, if it ran
	os.Exit(code)
}
