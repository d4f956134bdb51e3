package environments_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/harness"
)

// cluster is one real harness cluster (environments/local-east.yaml) shared
// by the package's tests.
var cluster *harness.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	specs, err := harness.LocalSpecs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	cluster, err = harness.Start(ctx, specs[0])
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start cluster:", err)
		os.Exit(1)
	}
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}
