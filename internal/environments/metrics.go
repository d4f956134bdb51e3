package environments

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// credentialsExpiryDesc is when each environment's credentials stop
// working, for an alert well before (deploy/prometheus): one series per
// environment whose credentials carry an expiry.
var credentialsExpiryDesc = prometheus.NewDesc("storage_gateway_environment_credentials_expire_time_seconds",
	"When the environment's credentials expire (Unix time), where they say so (a token's exp claim, a client certificate's NotAfter).",
	[]string{"environment"}, nil)

// metricsTimeout bounds the registry query of one scrape.
const metricsTimeout = 2 * time.Second

// RegisterMetrics exposes the registry's metrics in reg, read from Postgres when
// Prometheus scrapes: the same on every replica.
func (s *Service) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(registryCollector{s})
}

type registryCollector struct{ s *Service }

func (c registryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- credentialsExpiryDesc }

// Collect reports nothing when the database does not answer: an absent
// series alerts as such, where a stale number would mislead.
func (c registryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	rows, err := c.s.repo.db.Query(ctx, `SELECT id, credentials_expire_time FROM environments
		WHERE credentials_expire_time IS NOT NULL ORDER BY id`)
	if err != nil {
		return
	}
	type expiry struct {
		id string
		at time.Time
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (expiry, error) {
		var e expiry
		err := row.Scan(&e.id, &e.at)
		return e, err
	})
	if err != nil {
		return
	}
	for _, e := range list {
		ch <- prometheus.MustNewConstMetric(credentialsExpiryDesc, prometheus.GaugeValue, float64(e.at.Unix()), e.id)
	}
}
