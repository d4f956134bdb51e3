// Package gatewaytest runs the gateway in-process for end-to-end tests: the
// HTTP API over a real registry (Postgres, key ring), a real cluster pool and
// the volume service, served on a local port with every response checked
// against the OpenAPI contract. It must never be imported by production code.
package gatewaytest

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/volumes"
	"github.com/dcm-project/storage-gateway/test/contract"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// Options adjust a Gateway.
type Options struct {
	// HealthUnhealthyCode defaults to 200.
	HealthUnhealthyCode int
}

// Gateway is a running in-process gateway.
type Gateway struct {
	URL      string
	Registry *registrytest.Registry
	// Environments is the registry service the API uses (connected to Pool).
	Environments *environments.Service
	Pool         *clusters.Pool
	Volumes      *volumes.Service
}

// Health checks run fast in tests so reachability changes show within
// seconds.
const (
	healthInterval = 500 * time.Millisecond
	healthTimeout  = time.Second
)

// Start runs a gateway until the test ends.
func Start(t *testing.T, opts Options) *Gateway {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway logs:\n%s", reg.Logs.String())
		}
	})
	var registry *environments.Service
	pool := clusters.NewPool(clusters.PoolOptions{
		Client:         clusters.ClientOptions{Egress: registrytest.Loopback, QPS: 100, Burst: 200},
		SyncTimeout:    30 * time.Second,
		HealthInterval: healthInterval,
		HealthTimeout:  healthTimeout,
		Logger:         reg.Logger,
		OnHealth:       func(id string, h clusters.Health) { registry.RecordHealth(id, h) },
	})
	registry = reg.NewService(registrytest.Options{Pool: pool})
	t.Cleanup(pool.Close)
	vols := volumes.NewService(volumes.Options{DB: reg.Pool, Environments: registry, Pool: pool, Logger: reg.Logger})
	if opts.HealthUnhealthyCode == 0 {
		opts.HealthUnhealthyCode = 200
	}
	handler := api.New(api.Options{
		Logger: reg.Logger, Metrics: prometheus.NewRegistry(), Environments: registry, Volumes: vols,
		StartTime: time.Now(), HealthUnhealthyCode: opts.HealthUnhealthyCode,
	})
	srv := httptest.NewServer(contract.Validating(t, handler))
	t.Cleanup(srv.Close)
	return &Gateway{URL: srv.URL, Registry: reg, Environments: registry, Pool: pool, Volumes: vols}
}
