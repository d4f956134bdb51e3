package clusters

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// connectionsDesc is the pool's gauge: how many environments it holds in
// each state, and whether their caches have synced — what an operator
// watches after a restart, and what the fleet benchmark waits on.
var connectionsDesc = prometheus.NewDesc("storage_gateway_cluster_connections",
	"Environments the cluster pool holds, by the state of their live connection and whether its caches have synced.",
	[]string{"state", "synced"}, nil)

// poolStates are the states a pool connection reports; each is exported
// (as zero when no connection has it) so a dashboard's series never vanish.
var poolStates = []HealthState{HealthPending, HealthReady, HealthDegraded, HealthUnreachable}

// Register exposes the pool's connection gauge in reg. It is computed on
// scrape from the connections' current health.
func (p *Pool) Register(reg prometheus.Registerer) error { return reg.Register(poolCollector{p}) }

type poolCollector struct{ pool *Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- connectionsDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct {
		state  HealthState
		synced bool
	}
	counts := map[key]int{}
	for _, id := range c.pool.IDs() {
		if h, ok := c.pool.Health(id); ok {
			counts[key{h.State, h.Synced}]++
		}
	}
	for _, state := range poolStates {
		for _, synced := range []bool{false, true} {
			ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue,
				float64(counts[key{state, synced}]), string(state), strconv.FormatBool(synced))
		}
	}
}
