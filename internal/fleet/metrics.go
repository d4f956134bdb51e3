package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/metrics"
)

// The fleet's series: what ops dashboards and alerts need of each
// environment's storage, read from the index (no cluster call, the same on
// every replica). kube-state-metrics exports StorageClasses per cluster but
// nobody exports CSIStorageCapacity; these fill that gap fleet-wide. Every
// series names the environment's region and zone, so the dashboard groups
// by them without a join. The finest grain is a class's topology segment:
// never a volume.
var (
	syncAgeGauge = metrics.NewGauge("storage_gateway_environment_sync_age_seconds",
		"Seconds since the environment's storage data was last known current: 0 while its cluster is watched live; absent until it was ever observed.",
		"environment", "region", "zone")
	classInfoGauge = metrics.NewGauge("storage_gateway_storage_class_info",
		"A StorageClass an environment offers (always 1), with its provisioner, binding mode, whether its volumes can expand and whether it is the default.",
		"environment", "region", "zone", "storage_class", "provisioner", "volume_binding_mode", "expandable", "is_default")
	capacityGauge = metrics.NewGauge("storage_gateway_storage_class_capacity_bytes",
		"Capacity the class's CSI driver publishes (CSIStorageCapacity), per topology segment (a node selector; empty when the driver names none).",
		"environment", "region", "zone", "storage_class", "topology")
)

// Metrics returns the index's metric families (see package metrics).
func (ix *Index) Metrics() prometheus.Gatherer { return prometheus.GathererFunc(ix.gatherMetrics) }

// gatherMetrics reads the environments' immutable views, taken under the
// read lock and used after it is released: a scrape never holds up the feed
// (a waiting writer would hold up every fleet query behind it). The class
// series were built with each view; only the ages are built per scrape.
func (ix *Index) gatherMetrics() ([]*dto.MetricFamily, error) {
	ix.mu.RLock()
	views := make([]*envView, len(ix.order))
	for i, e := range ix.order {
		views[i] = e.view
	}
	ix.mu.RUnlock()
	now := time.Now()
	var ages, info, capacity []*dto.Metric
	for _, v := range views {
		if v.observed.IsZero() {
			continue // never observed: its classes are unknown, not absent
		}
		age := 0.0
		if v.stale {
			age = max(now.Sub(v.observed).Seconds(), 0)
		}
		m, err := syncAgeGauge.Series(age, v.meta.ID, v.meta.Region, v.meta.Zone)
		if err != nil {
			return nil, err
		}
		ages = append(ages, m)
		info = append(info, v.series.info...)
		capacity = append(capacity, v.series.capacity...)
	}
	return []*dto.MetricFamily{syncAgeGauge.Family(ages), classInfoGauge.Family(info), capacityGauge.Family(capacity)}, nil
}

// classSeries are an environment's class series, built when its view is
// rendered so a scrape of a large fleet builds none of them. Each list is
// in the order the registry would sort it (by label values, labels by
// name), so the answer reads as any other exporter's.
type classSeries struct {
	info, capacity []*dto.Metric
}

// newClassSeries builds meta's classes' series. Class names, provisioners
// and topologies come from the API server and meta from the validated
// registry, so a series that does not build is a bug.
func newClassSeries(meta Meta, classes []capabilities.Class) classSeries {
	var s classSeries
	must := func(m *dto.Metric, err error) *dto.Metric {
		if err != nil {
			panic(fmt.Sprintf("fleet: metric of %s: %v", meta.ID, err))
		}
		return m
	}
	byInfo := slices.Clone(classes)
	slices.SortFunc(byInfo, func(a, b capabilities.Class) int {
		return cmp.Or(cmp.Compare(strconv.FormatBool(a.AllowVolumeExpansion), strconv.FormatBool(b.AllowVolumeExpansion)),
			cmp.Compare(strconv.FormatBool(a.IsDefault), strconv.FormatBool(b.IsDefault)),
			cmp.Compare(a.Provisioner, b.Provisioner), cmp.Compare(a.Name, b.Name))
	})
	for _, c := range byInfo {
		s.info = append(s.info, must(classInfoGauge.Series(1, meta.ID, meta.Region, meta.Zone, c.Name, c.Provisioner,
			c.VolumeBindingMode, strconv.FormatBool(c.AllowVolumeExpansion), strconv.FormatBool(c.IsDefault))))
	}
	for _, c := range classes { // by name, as Describe returns them
		if c.Capacity == nil {
			continue
		}
		for _, seg := range c.Capacity.Segments {
			s.capacity = append(s.capacity, must(capacityGauge.Series(float64(seg.CapacityBytes), meta.ID, meta.Region, meta.Zone, c.Name, seg.Topology)))
		}
	}
	return s
}
