package outbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// relayMetrics tell operators whether DCM hears about volumes in time.
type relayMetrics struct {
	failures  prometheus.Counter
	published *prometheus.CounterVec
}

func newRelayMetrics(reg prometheus.Registerer, db *pgxpool.Pool) relayMetrics {
	m := relayMetrics{
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "storage_gateway", Subsystem: "outbox",
			Name: "publish_failures_total", Help: "Failed attempts to publish a status event."}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "storage_gateway", Subsystem: "outbox",
			Name: "published_total", Help: "Status events published, by status."}, []string{"status"}),
	}
	reg.MustRegister(m.failures, m.published, backlog{db: db})
	return m
}

// backlog reports the outbox's unsent events when Prometheus scrapes: the
// figure is the database's, shared by every replica, and asking once per
// scrape costs one query where asking after every drain cost one per
// published batch.
type backlog struct{ db *pgxpool.Pool }

var (
	depthDesc = prometheus.NewDesc("storage_gateway_outbox_depth",
		"Status events waiting to be published.", nil, nil)
	oldestAgeDesc = prometheus.NewDesc("storage_gateway_outbox_oldest_unsent_age_seconds",
		"Age of the oldest unpublished status event (0 when none waits).", nil, nil)
)

// backlogTimeout bounds the query, so a slow database cannot hang a scrape.
const backlogTimeout = 2 * time.Second

func (backlog) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- oldestAgeDesc
}

// Collect reports nothing when the database does not answer: a stale
// number would mislead, and the outbox alert's expression has no series to
// fire on while the database is away, which the readiness alert covers.
func (b backlog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	var depth int64
	var age float64
	if err := b.db.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(create_time)), 0)
		FROM outbox WHERE sent_time IS NULL`).Scan(&depth, &age); err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(depth))
	ch <- prometheus.MustNewConstMetric(oldestAgeDesc, prometheus.GaugeValue, age)
}
