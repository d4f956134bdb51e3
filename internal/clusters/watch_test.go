package clusters

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// The informers' watches ask the API server for 30–60 minutes, not
// client-go's 5–10: an idle environment re-opens each watch a sixth as
// often. Only claims and StorageClasses are watched here: events only while
// a claim is Pending (this cluster has none), CSIDrivers and
// CSIStorageCapacities are listed — and the cluster still syncs.
func TestInformersWatchLong(t *testing.T) {
	lists := map[string]string{
		"persistentvolumeclaims": "v1/PersistentVolumeClaimList", "events": "v1/EventList",
		"storageclasses": "storage.k8s.io/v1/StorageClassList", "csidrivers": "storage.k8s.io/v1/CSIDriverList",
		"csistoragecapacities": "storage.k8s.io/v1/CSIStorageCapacityList", "resourcequotas": "v1/ResourceQuotaList",
	}
	var mu sync.Mutex
	timeouts := map[string]int{} // resource: the watch's timeoutSeconds
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		resource, q := path.Base(r.URL.Path), r.URL.Query()
		switch {
		case r.URL.Path == "/readyz":
			_, _ = w.Write([]byte("ok"))
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			seconds, _ := strconv.Atoi(q.Get("timeoutSeconds"))
			mu.Lock()
			timeouts[resource] = seconds
			mu.Unlock()
			if q.Get("sendInitialEvents") == "true" { // no streaming lists: list, then watch
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`))
				return
			}
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case lists[resource] != "":
			kind := lists[resource]
			i := len(kind) - len(path.Base(kind)) - 1
			_ = json.NewEncoder(w).Encode(map[string]any{"kind": path.Base(kind), "apiVersion": kind[:i],
				"metadata": map[string]any{"resourceVersion": "1"}, "items": []any{}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	p := NewPool(PoolOptions{Client: ClientOptions{Egress: egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
	t.Cleanup(p.Close)
	if err := p.Ensure(Target{EnvironmentID: "long-watches", Connection: kubeconfig.Connection{Server: srv.URL, CAData: cert, Token: "t"},
		Namespaces: []string{"dcm-volumes"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "synced", func() bool {
		c, ok := p.Get("long-watches")
		return ok && c.Health().Synced
	})
	poll.Never(t, 200*time.Millisecond, "a watch of another resource", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(timeouts) > 2
	})
	mu.Lock()
	defer mu.Unlock()
	if len(timeouts) != 2 || timeouts["persistentvolumeclaims"] == 0 || timeouts["storageclasses"] == 0 {
		t.Errorf("watched %v; want claims and StorageClasses only", timeouts)
	}
	for resource, seconds := range timeouts {
		if seconds < 30*60 || seconds > 60*60 {
			t.Errorf("watch of %s asks for %d s; want 30–60 minutes", resource, seconds)
		}
	}
}
