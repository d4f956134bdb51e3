package e2e

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/dcm-project/storage-gateway/internal/fleet"
)

// labelsOf returns a series' labels by name.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestFleetMetrics: what /metrics says about the fleet is what the API says,
// for two live harness clusters, and follows a cluster going away; no
// series names a volume.
func TestFleetMetrics(t *testing.T) {
	c := liveFleet(t)
	east, west := clusters[0], clusters[1]
	eastID, westID := east.Spec.Environment.ID, west.Spec.Environment.ID
	var ids []string
	for range 2 {
		id := uuid.NewString()
		code, body := c.do(http.MethodPost, volumesPath(eastID)+"?id="+id,
			map[string]any{"spec": storageSpec("metered", "1Gi", map[string]any{"storage_class": "standard"})})
		c.want(http.StatusCreated, code, body)
		ids = append(ids, id)
	}
	for _, id := range ids {
		c.waitStatus(eastID, id, "RUNNING", time.Minute)
	}
	// The API answers from the live claim; the counts are the recorded
	// statuses, which follow within the status flow's debounce.
	running := []string{"environment", eastID, "storage_class", "standard", "status", "RUNNING"}
	var m metricFamilies
	c.eventually(30*time.Second, "both volumes recorded RUNNING", func() bool {
		m = scrape(t, c)
		return m.value("storage_gateway_volumes", running...) == 2
	})
	for _, id := range []string{eastID, westID} {
		var env struct {
			Region     string `json:"region"`
			Zone       string `json:"zone"`
			Connection struct {
				CredentialsExpireTime *time.Time `json:"credentials_expire_time"`
			} `json:"connection"`
		}
		c.getJSON("/api/v1alpha1/environments/"+id, &env)
		where := []string{"environment", id, "region", env.Region, "zone", env.Zone}
		if got := m.value("storage_gateway_environment_up", append(where, "state", "READY")...); got != 1 {
			t.Errorf("%s up = %v, want 1 (READY)", id, got)
		}
		if got := m.value("storage_gateway_environment_sync_age_seconds", where...); got != 0 || !m.has("storage_gateway_environment_sync_age_seconds", where...) {
			t.Errorf("%s sync age = %v, want 0 while watched", id, got)
		}
		if exp := env.Connection.CredentialsExpireTime; exp == nil ||
			int64(m.value("storage_gateway_environment_credentials_expire_time_seconds", where...)) != exp.Unix() {
			t.Errorf("%s credentials expiry exported %v, the API says %v", id, m.value("storage_gateway_environment_credentials_expire_time_seconds", where...), exp)
		}

		// One info series per class the API shows, saying what it says;
		// one capacity series per published segment.
		var ec fleet.EnvironmentClasses
		c.getJSON("/api/v1alpha1/environments/"+id+"/storage-classes", &ec)
		info, capacity := 0, 0
		for _, d := range ec.Classes {
			class := slices.Concat(where, []string{"storage_class", d.Name})
			want := slices.Concat(class, []string{"provisioner", d.Provisioner, "volume_binding_mode", d.VolumeBindingMode,
				"expandable", strconv.FormatBool(d.AllowVolumeExpansion), "is_default", strconv.FormatBool(d.IsDefault)})
			if !m.has("storage_gateway_storage_class_info", want...) || m.value("storage_gateway_storage_class_info", want...) != 1 {
				t.Errorf("no info series %v", want)
			}
			info++
			if d.Capacity == nil {
				continue
			}
			for _, s := range d.Capacity.Segments {
				seg := slices.Concat(class, []string{"topology", s.Topology})
				if got := m.value("storage_gateway_storage_class_capacity_bytes", seg...); got != float64(s.CapacityBytes) || s.CapacityBytes == 0 {
					t.Errorf("capacity %v = %v, the API says %d", seg, got, s.CapacityBytes)
				}
				capacity++
			}
		}
		if got := m.count("storage_gateway_storage_class_info", "environment", id); got != info || info == 0 {
			t.Errorf("%s: %d info series, the API shows %d classes", id, got, info)
		}
		if got := m.count("storage_gateway_storage_class_capacity_bytes", "environment", id); got != capacity {
			t.Errorf("%s: %d capacity series, the API shows %d segments", id, got, capacity)
		}
	}
	// east publishes its standard class's capacity in two zones (environments/local-east.yaml).
	if got := m.value("storage_gateway_storage_class_capacity_bytes", "environment", eastID, "storage_class", "standard",
		"topology", "topology.kubernetes.io/zone=east-a"); got != 2<<40 {
		t.Errorf("east standard capacity in east-a = %v, want 2Ti", got)
	}
	if got := m.value("storage_gateway_volume_requested_bytes", running...); got != 2<<30 {
		t.Errorf("requested bytes of those = %v, want 2Gi", got)
	}
	// Never a series per volume: no label holds a volume's id.
	for name, f := range m {
		for _, series := range f.GetMetric() {
			for label, value := range labelsOf(series) {
				for _, id := range ids {
					if strings.Contains(value, id) {
						t.Errorf("%s names volume %s in its label %s", name, id, label)
					}
				}
			}
		}
	}

	// east goes away: down, its data ageing, its classes still shown (the
	// last known).
	classes := m.count("storage_gateway_storage_class_info", "environment", eastID)
	east.SetReachable(false)
	defer east.SetReachable(true)
	c.eventually(30*time.Second, "east reported down and ageing", func() bool {
		m = scrape(t, c)
		return m.has("storage_gateway_environment_up", "environment", eastID, "state", "UNREACHABLE") &&
			m.value("storage_gateway_environment_up", "environment", eastID) == 0 &&
			m.count("storage_gateway_environment_up", "environment", eastID) == 1 &&
			m.value("storage_gateway_environment_sync_age_seconds", "environment", eastID) > 0
	})
	if got := m.count("storage_gateway_storage_class_info", "environment", eastID); got != classes {
		t.Errorf("east down shows %d class series, %d before", got, classes)
	}
	if m.value("storage_gateway_environment_up", "environment", westID) != 1 {
		t.Error("west is reported down with east")
	}
	east.SetReachable(true)
	c.eventually(30*time.Second, "east reported up and current again, the volumes' events published", func() bool {
		m = scrape(t, c)
		return m.value("storage_gateway_environment_up", "environment", eastID) == 1 &&
			m.value("storage_gateway_environment_sync_age_seconds", "environment", eastID) == 0 &&
			m.sum("storage_gateway_outbox_published_total") > 0
	})
	checkMonitoring(t, m)
}

// monitoringFiles are the dashboard and alerts the repository ships
// (deploy/), which the chart carries copies of.
const (
	dashboardFile = "../../deploy/grafana/storage-gateway.json"
	alertsFile    = "../../deploy/prometheus/alerts.yaml"
)

// grafanaVariables stand in for the dashboard's variables, so its
// expressions parse as PromQL.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "${datasource}", "prometheus", "$region", ".*", "$environment", ".*")

// metricsIn parses a PromQL expression and returns the metric names it
// selects.
func metricsIn(expr string) ([]string, error) {
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, nil
}

// exported lists the series names a scrape shows: a family's name, and a
// histogram's _bucket, _sum and _count.
func exported(m metricFamilies) map[string]bool {
	names := map[string]bool{}
	for name, f := range m {
		names[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

// checkMonitoring: every expression of the dashboard and of the alerting
// rules parses (the rule file as Prometheus loads it, templates included),
// and selects only metrics the gateway exports (m is a scrape of a gateway
// serving volumes on two clusters).
func checkMonitoring(t *testing.T, m metricFamilies) {
	known := exported(m)
	check := func(where, expr string) {
		t.Helper()
		names, err := metricsIn(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			return
		}
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %s", where, expr)
		}
		for _, name := range names {
			if !known[name] {
				t.Errorf("%s selects %s, which the gateway does not export", where, name)
			}
		}
	}
	// The check can fail: a misspelt metric is caught.
	if names, err := metricsIn(`sum(storage_gateway_environment_upp{region=~"$region"})`); err != nil || known[names[0]] {
		t.Fatalf("a misspelt metric passes the check (%v, %v)", names, err)
	}

	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", alertsFile, errs)
	}
	alerts := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			check(alertsFile+": "+r.Alert, r.Expr)
			alerts[r.Alert] = r.For.String()
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: alert %s needs a severity, a summary and a description", alertsFile, r.Alert)
			}
		}
	}
	want := map[string]string{"StorageGatewayEnvironmentUnreachable": "5m", "StorageGatewayCredentialsExpiringSoon": "10m",
		"StorageGatewayOutboxLagging": "1m", "StorageGatewayStorageClassCapacityLow": "15m", "StorageGatewayNoReplicaReady": "2m"}
	if !maps.Equal(alerts, want) {
		t.Errorf("alerts (name: for) %v, want %v", alerts, want)
	}

	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
		Panels []struct {
			Title, Type string
			Datasource  *struct{ UID string }
			Targets     []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	variables := map[string]string{}
	for _, v := range dashboard.Templating.List {
		variables[v.Name] = v.Type
		if q, ok := v.Query.(map[string]any); ok {
			// label_values(SELECTOR, label): the selector must name an exported metric.
			selector, _, _ := strings.Cut(strings.TrimPrefix(q["query"].(string), "label_values("), ", ")
			check(dashboardFile+": variable "+v.Name, selector)
		}
	}
	if variables["datasource"] != "datasource" || variables["region"] != "query" || variables["environment"] != "query" {
		t.Errorf("dashboard variables %v, want a datasource, region and environment", variables)
	}
	targets := 0
	for _, p := range dashboard.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		for _, target := range p.Targets {
			check(dashboardFile+": panel "+p.Title, target.Expr)
			targets++
		}
	}
	if targets < 15 {
		t.Errorf("the dashboard has %d queries", targets)
	}
}
