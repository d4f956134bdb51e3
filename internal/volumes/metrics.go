package volumes

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dcm-project/storage-gateway/internal/metrics"
)

// The volumes' series, per environment, status and StorageClass: how much
// storage DCM has asked for where, and in what state. Volumes are counted,
// never listed: a series per volume would grow with every create.
var (
	volumeCountGauge = metrics.NewGauge("storage_gateway_volumes",
		"Volumes the gateway serves, by environment, StorageClass and status (a series exists while at least one volume has that status; DELETED records are not counted).",
		volumeLabels...)
	requestedBytesGauge = metrics.NewGauge("storage_gateway_volume_requested_bytes",
		"Capacity those volumes request (their spec, expansions included), by environment, StorageClass and status.",
		volumeLabels...)
)

var volumeLabels = []string{"environment", "region", "zone", "storage_class", "status"}

// metricsTimeout bounds the query of one scrape.
const metricsTimeout = 2 * time.Second

// Metrics returns the volume counts' metric families (see package metrics),
// read from Postgres when Prometheus scrapes: exact, and the same on every
// replica.
func (s *Service) Metrics() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
		defer cancel()
		families, err := s.repo.volumeMetrics(ctx)
		if err != nil {
			return nil, fmt.Errorf("volume metrics: %w", err)
		}
		return families, nil
	})
}

// volumeMetrics counts the volumes by environment, status and class, from
// the index over exactly those columns (migration 00010) in its order, so
// Postgres neither parses specs nor sorts, and the series come out in the
// order they are served. It groups by the capacity as written too (volumes
// of one class mostly share a few sizes), so only the distinct sizes are
// parsed here.
func (r repository) volumeMetrics(ctx context.Context) ([]*dto.MetricFamily, error) {
	rows, err := r.db.Query(ctx, `WITH g AS (
			SELECT environment_id, status, storage_class, capacity, count(*) AS volumes
			FROM volumes WHERE status <> 'DELETED'
			GROUP BY environment_id, status, storage_class, capacity)
		SELECT g.environment_id, e.region, e.zone, g.status, g.storage_class, g.capacity, g.volumes
		FROM g JOIN environments e ON e.id = g.environment_id
		ORDER BY g.environment_id, g.status, g.storage_class`)
	if err != nil {
		return nil, err
	}
	type group struct {
		env, region, zone, status, class string
		volumes                          int64
		bytes                            float64
	}
	var groups []group
	sizes := map[string]float64{}
	var row group
	var capacity string
	var count int64
	_, err = pgx.ForEachRow(rows, []any{&row.env, &row.region, &row.zone, &row.status, &row.class, &capacity, &count}, func() error {
		size, ok := sizes[capacity]
		if !ok {
			// A record's capacity was validated when it was written; one
			// that does not parse counts as a volume without bytes.
			if q, err := resource.ParseQuantity(capacity); err == nil {
				size = q.AsApproximateFloat64()
			}
			sizes[capacity] = size
		}
		if n := len(groups); n == 0 || groups[n-1].env != row.env || groups[n-1].status != row.status || groups[n-1].class != row.class {
			groups = append(groups, group{env: row.env, region: row.region, zone: row.zone, status: row.status, class: row.class})
		}
		last := &groups[len(groups)-1]
		last.volumes += count
		last.bytes += size * float64(count)
		return nil
	})
	if err != nil {
		return nil, err
	}
	counts := make([]*dto.Metric, 0, len(groups))
	requested := make([]*dto.Metric, 0, len(groups))
	for _, g := range groups {
		c, err := volumeCountGauge.Series(float64(g.volumes), g.env, g.region, g.zone, g.class, g.status)
		if err != nil {
			return nil, err
		}
		b, err := requestedBytesGauge.Series(g.bytes, g.env, g.region, g.zone, g.class, g.status)
		if err != nil {
			return nil, err
		}
		counts, requested = append(counts, c), append(requested, b)
	}
	return []*dto.MetricFamily{volumeCountGauge.Family(counts), requestedBytesGauge.Family(requested)}, nil
}
