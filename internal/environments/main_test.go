package environments_test

import (
	"os"
	"testing"

	"github.com/dcm-project/storage-gateway/test/harness"
)

// cluster is one real harness cluster (environments/local-east.yaml) shared
// by the package's tests.
var cluster *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunWithLocalClusters(m, 1, func(c []*harness.Cluster) { cluster = c[0] }))
}
