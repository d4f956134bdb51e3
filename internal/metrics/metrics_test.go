package metrics_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dcm-project/storage-gateway/internal/metrics"
)

// A series is checked as the registry checks it; a family without series
// is left out; Gatherers serves every source's families sorted by name and
// one source's failure costs only its own families.
func TestGaugesAndGatherers(t *testing.T) {
	g := metrics.NewGauge("test_things", "Things.", "place")
	if _, err := g.Series(1, "a", "b"); err == nil {
		t.Error("a series with two values for one label was built")
	}
	if _, err := g.Series(1, "\xff"); err == nil {
		t.Error("a series with a label value that is not UTF-8 was built")
	}
	one, err := g.Series(2, "here")
	if err != nil || one.GetLabel()[0].GetValue() != "here" || one.GetGauge().GetValue() != 2 {
		t.Fatalf("series %v, %v", one, err)
	}
	if g.Family(nil) != nil {
		t.Error("a family without series is served")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_registered", Help: "In the registry."}))
	broken := errors.New("database away")
	all := metrics.Gatherers{
		reg,
		prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			return []*dto.MetricFamily{g.Family([]*dto.Metric{one}), nil}, nil
		}),
		prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return nil, broken }),
	}
	families, err := all.Gather()
	if !errors.Is(err, broken) {
		t.Errorf("error %v, want the failing source's", err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if !slices.Equal(names, []string{"test_registered", "test_things"}) {
		t.Errorf("families %v", names)
	}
}
