package harness

import (
	"os"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// verboseEnv, when set to any value, keeps the Kubernetes libraries' logs
// (provisioner, resizer, informers) on stderr for debugging.
const verboseEnv = "SG_HARNESS_VERBOSE"

// quietKubernetesLogs silences klog once per process: the provisioner library
// logs every event, which buries test output. Cluster state is asserted
// through the API, and control-plane logs stay in each cluster's work dir.
var quietKubernetesLogs = sync.OnceFunc(func() {
	if os.Getenv(verboseEnv) == "" {
		klog.SetLogger(logr.Discard())
	}
})
