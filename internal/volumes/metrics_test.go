package volumes

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// TestVolumeSeriesCountWhatTheRecordsHold: the scrape's series count the
// live volumes (DELETED records are not) by environment, class and status
// with the environment's region and zone, and sum their requested bytes
// across sizes written in any unit; a size that does not parse counts as a
// volume without bytes.
func TestVolumeSeriesCountWhatTheRecordsHold(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	for _, env := range []string{"east", "west"} {
		reg.InsertEnvironment(t, env)
	}
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET region = 'eu', zone = 'eu-1' WHERE id = 'east'`); err != nil {
		t.Fatal(err)
	}
	insertVolumes(t, reg, []stored{
		{"east", "v-0", "RUNNING", "fast", "1Gi"},
		{"east", "v-1", "RUNNING", "fast", "1Gi"}, // one group of two in the query
		{"east", "v-2", "RUNNING", "fast", "1024Mi"},
		{"east", "v-3", "RUNNING", "fast", "2Gi"},
		{"east", "v-4", "PROVISIONING", "fast", "1Gi"},
		{"east", "v-5", "RUNNING", "slow", "500M"},
		{"east", "v-6", "DELETED", "fast", "1Gi"},
		{"west", "v-7", "RUNNING", "fast", "lots"},
	})
	families, err := (&Service{repo: repository{db: reg.DB}}).Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = map[string]float64{}
		for _, m := range f.GetMetric() {
			got[f.GetName()][labelsOf(m)] = m.GetGauge().GetValue()
		}
	}
	const gi = 1 << 30
	want := map[string]map[string]float64{
		"storage_gateway_volumes": {
			"east/eu/eu-1/fast/PROVISIONING": 1, "east/eu/eu-1/fast/RUNNING": 4, "east/eu/eu-1/slow/RUNNING": 1, "west///fast/RUNNING": 1,
		},
		"storage_gateway_volume_requested_bytes": {
			"east/eu/eu-1/fast/PROVISIONING": gi, "east/eu/eu-1/fast/RUNNING": 5 * gi, "east/eu/eu-1/slow/RUNNING": 500e6, "west///fast/RUNNING": 0,
		},
	}
	for name, series := range want {
		if !maps.Equal(got[name], series) {
			t.Errorf("%s = %v, want %v", name, got[name], series)
		}
	}
}

// stored is a volume record as a test stores it.
type stored struct{ env, id, status, class, capacity string }

// insertVolumes stores volume records (their environments exist).
func insertVolumes(t *testing.T, reg *registrytest.Fixture, vols []stored) {
	t.Helper()
	for _, v := range vols {
		spec := fmt.Sprintf(`{"name": %q, "storage_class": %q, "capacity": %q}`, v.id, v.class, v.capacity)
		if _, err := reg.DB.Exec(context.Background(), `INSERT INTO volumes (environment_id, id, namespace, spec, status) VALUES ($1, $2, 'ns', $3, $4)`,
			v.env, v.id, spec, v.status); err != nil {
			t.Fatal(err)
		}
	}
}

// labelsOf is a series' environment/region/zone/storage_class/status.
func labelsOf(m *dto.Metric) string {
	byName := map[string]string{}
	for _, l := range m.GetLabel() {
		byName[l.GetName()] = l.GetValue()
	}
	var parts []string
	for _, name := range volumeLabels {
		parts = append(parts, byName[name])
	}
	return strings.Join(parts, "/")
}
