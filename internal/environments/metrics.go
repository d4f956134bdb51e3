package environments

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dcm-project/storage-gateway/internal/metrics"
)

// The registry's per-environment series. Every one carries the
// environment's region and zone, so a dashboard groups the fleet by them
// without a join; a series per environment is the finest the gateway
// exports (never one per volume).
var (
	// upGauge names the state too: one series per environment at a time
	// (the state label changes with it), so a dashboard shows why one is
	// down without a second series per environment.
	upGauge = metrics.NewGauge("storage_gateway_environment_up",
		"1 when the environment's cluster answers with the credentials accepted (state READY or DEGRADED), 0 otherwise (PENDING, UNREACHABLE, UNAUTHORIZED); state is the environment's.",
		"environment", "region", "zone", "state")
	// credentialsExpiryGauge is when each environment's credentials stop
	// working, for an alert well before (deploy/prometheus): only
	// environments whose credentials carry an expiry have one.
	credentialsExpiryGauge = metrics.NewGauge("storage_gateway_environment_credentials_expire_time_seconds",
		"When the environment's credentials expire (Unix time), where they say so (a token's exp claim, a client certificate's NotAfter).",
		"environment", "region", "zone")
	// dcmWithoutClaimGauge counts what a DCM provider take-over would
	// orphan, for an alert before it does.
	dcmWithoutClaimGauge = metrics.NewGauge("storage_gateway_environment_dcm_instances_without_claim",
		"DCM's instances of the environment's provider name that it neither serves nor can adopt (no volume record, no labelled claim in its namespaces), as last counted; only where counted.",
		"environment", "region", "zone")
	// dcmReclaimGauge says when another endpoint last held the provider's
	// name and the gateway took it back (DCM's storage SP started again).
	dcmReclaimGauge = metrics.NewGauge("storage_gateway_environment_dcm_provider_reclaim_time_seconds",
		"When the gateway last registered the environment's provider name again after another endpoint had registered it (Unix time); only where that happened.",
		"environment", "region", "zone")
)

// metricsTimeout bounds the registry query of one scrape.
const metricsTimeout = 2 * time.Second

// Metrics returns the registry's metric families (see package metrics),
// read from Postgres when Prometheus scrapes: the same on every replica.
func (s *Service) Metrics() prometheus.Gatherer { return prometheus.GathererFunc(s.gatherMetrics) }

// metricsRow is what a scrape reads of one environment.
type metricsRow struct {
	id, region, zone string
	state            State
	expiry           *time.Time
	withoutClaim     *int
	reclaimed        *time.Time
}

// gatherMetrics serves nothing when the database does not answer (a stale
// number would mislead): the scrape goes on without these series, and the
// handler logs the error and counts it in
// promhttp_metric_handler_errors_total{cause="gathering"}.
func (s *Service) gatherMetrics() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
	defer cancel()
	rows, err := s.repo.db.Query(ctx, `SELECT id, region, zone, state, credentials_expire_time,
			(dcm_registration->>'instances_without_claim')::int, (dcm_registration->>'reclaim_time')::timestamptz
		FROM environments ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("environment metrics: %w", err)
	}
	var up, expiries, withoutClaim, reclaims []*dto.Metric
	var r metricsRow
	_, err = pgx.ForEachRow(rows, []any{&r.id, &r.region, &r.zone, &r.state, &r.expiry, &r.withoutClaim, &r.reclaimed}, func() error {
		value := 0.0
		if r.state == StateReady || r.state == StateDegraded {
			value = 1
		}
		m, err := upGauge.Series(value, r.id, r.region, r.zone, string(r.state))
		if err != nil {
			return err
		}
		up = append(up, m)
		for _, s := range []struct {
			gauge *metrics.Gauge
			value *float64
			into  *[]*dto.Metric
		}{
			{&credentialsExpiryGauge, unixTime(r.expiry), &expiries},
			{&dcmWithoutClaimGauge, count(r.withoutClaim), &withoutClaim},
			{&dcmReclaimGauge, unixTime(r.reclaimed), &reclaims},
		} {
			if s.value == nil {
				continue
			}
			m, err := s.gauge.Series(*s.value, r.id, r.region, r.zone)
			if err != nil {
				return err
			}
			*s.into = append(*s.into, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("environment metrics: %w", err)
	}
	return []*dto.MetricFamily{upGauge.Family(up), credentialsExpiryGauge.Family(expiries), dcmWithoutClaimGauge.Family(withoutClaim),
		dcmReclaimGauge.Family(reclaims)}, nil
}

// unixTime is t in seconds, nil when t is.
func unixTime(t *time.Time) *float64 {
	if t == nil {
		return nil
	}
	v := float64(t.Unix())
	return &v
}

// count is n as a sample, nil when n is.
func count(n *int) *float64 {
	if n == nil {
		return nil
	}
	v := float64(*n)
	return &v
}
