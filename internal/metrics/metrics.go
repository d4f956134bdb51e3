// Package metrics serves the fleet's large metric families beside the
// Prometheus registry.
//
// The registry checks every series of every scrape (label names, UTF-8,
// a hash per series against duplicates) and sorts each family: on the
// 5,000-environment fleet of BenchmarkMetricsScrape (internal/gateway) a
// scrape through it takes 1.5–1.7 times as long. The fleet's families are
// built here instead, checked when each series is built (the same UTF-8
// and label count checks, by client_golang's own constructors) and
// distinct by construction (one series per environment, class, segment or
// group), and Gatherers serves them with the registry's (families sorted
// by name) through client_golang's handler and encoders. Everything small
// stays in the registry.
package metrics

import (
	"cmp"
	"errors"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Gauge is a gauge family whose series its owner builds.
type Gauge struct {
	desc *prometheus.Desc
	name string
	help string
}

// NewGauge describes a gauge family; it panics on an invalid name or label,
// as prometheus.MustRegister would (the names are constants).
func NewGauge(name, help string, labels ...string) Gauge {
	desc := prometheus.NewDesc(name, help, labels, nil)
	if err := desc.Err(); err != nil {
		panic(err)
	}
	return Gauge{desc: desc, name: name, help: help}
}

// Series is one series of the family. Label values are checked as the
// registry checks them (their number, valid UTF-8).
func (g Gauge) Series(value float64, labelValues ...string) (*dto.Metric, error) {
	m, err := prometheus.NewConstMetric(g.desc, prometheus.GaugeValue, value, labelValues...)
	if err != nil {
		return nil, err
	}
	out := &dto.Metric{}
	return out, m.Write(out)
}

// Family returns the family of series, which must be distinct; their order
// is the order they are served in (sort them by label values, as the
// registry would, for a readable answer). A family without series is
// omitted, as the registry omits it.
func (g Gauge) Family(series []*dto.Metric) *dto.MetricFamily {
	if len(series) == 0 {
		return nil
	}
	return &dto.MetricFamily{Name: proto.String(g.name), Help: proto.String(g.help), Type: dto.MetricType_GAUGE.Enum(), Metric: series}
}

// Gatherers serves its gatherers' families together, sorted by name,
// without checking them again: the first is the registry (which checks its
// own), the others are sources of Gauge families. A family name must come
// from one gatherer only; the gateway's metrics test parses the whole
// answer, which fails on a name served twice.
type Gatherers []prometheus.Gatherer

// Gather implements prometheus.Gatherer. The gatherers run at once (each
// source asks Postgres for its own rows, so their round trips overlap) and
// are all waited for. Their errors are joined and returned with what was
// gathered.
func (gs Gatherers) Gather() ([]*dto.MetricFamily, error) {
	results := make([][]*dto.MetricFamily, len(gs))
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { results[i], errs[i] = g.Gather() })
	}
	wg.Wait()
	var all []*dto.MetricFamily
	for _, families := range results {
		for _, f := range families {
			if f != nil {
				all = append(all, f)
			}
		}
	}
	slices.SortFunc(all, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return all, errors.Join(errs...)
}
