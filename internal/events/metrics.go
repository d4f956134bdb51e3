package events

import "github.com/prometheus/client_golang/prometheus"

// relayMetrics tell operators whether DCM hears about volumes in time.
type relayMetrics struct {
	depth     prometheus.Gauge
	oldestAge prometheus.Gauge
	failures  prometheus.Counter
	published *prometheus.CounterVec
}

func newRelayMetrics(reg prometheus.Registerer) relayMetrics {
	m := relayMetrics{
		depth: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "storage_gateway", Subsystem: "outbox",
			Name: "depth", Help: "Status events waiting to be published."}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "storage_gateway", Subsystem: "outbox",
			Name: "oldest_unsent_age_seconds", Help: "Age of the oldest unpublished status event."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "storage_gateway", Subsystem: "outbox",
			Name: "publish_failures_total", Help: "Failed attempts to publish a status event."}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "storage_gateway", Subsystem: "outbox",
			Name: "published_total", Help: "Status events published, by status."}, []string{"status"}),
	}
	reg.MustRegister(m.depth, m.oldestAge, m.failures, m.published)
	return m
}
