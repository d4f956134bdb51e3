// Package prometheus_test evaluates the alerting rules of alerts.yaml with
// Prometheus's own PromQL engine on series shaped as the gateway exports
// them, scraped from two replicas: each alert fires for the state it names
// and for nothing else. (test/e2e checks each metric they select is one a
// real gateway exports.)
package prometheus_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// alerts returns each alert's expression, on one line.
func alerts(t *testing.T) map[string]string {
	t.Helper()
	groups, errs := rulefmt.ParseFile("alerts.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	out := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = strings.Join(strings.Fields(r.Expr), " ")
		}
	}
	return out
}

func TestAlertsFireForWhatTheyName(t *testing.T) {
	expr := alerts(t)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for name, script := range map[string]string{
		// a is down on both replicas, b is up.
		"StorageGatewayEnvironmentUnreachable": `
load 1m
	storage_gateway_environment_up{instance="p1", environment="a", region="r1", zone="z1", state="UNREACHABLE"} 0x10
	storage_gateway_environment_up{instance="p2", environment="a", region="r1", zone="z1", state="UNREACHABLE"} 0x10
	storage_gateway_environment_up{instance="p1", environment="b", region="r1", zone="z2", state="READY"} 1x10
	storage_gateway_environment_up{instance="p2", environment="b", region="r1", zone="z2", state="READY"} 1x10

eval instant at 10m %s
	{environment="a", region="r1", zone="z1"} 0
`,
		// At 600 s, a expires in 3 days, b in 30.
		"StorageGatewayCredentialsExpiringSoon": `
load 1m
	storage_gateway_environment_credentials_expire_time_seconds{instance="p1", environment="a", region="r1", zone="z1"} 259800x10
	storage_gateway_environment_credentials_expire_time_seconds{instance="p2", environment="a", region="r1", zone="z1"} 259800x10
	storage_gateway_environment_credentials_expire_time_seconds{instance="p1", environment="b", region="r1", zone="z2"} 2592600x10

eval instant at 10m %s
	{environment="a", region="r1", zone="z1"} 259200
`,
		"StorageGatewayOutboxLagging": `
load 1m
	storage_gateway_outbox_oldest_unsent_age_seconds{instance="p1"} 400x10
	storage_gateway_outbox_oldest_unsent_age_seconds{instance="p2"} 10x10

eval instant at 10m %s
	{} 400
`,
		// fast: 5 GiB published in two zones, 70 GiB requested (6.7 % free);
		// slow: 100 GiB published, 10 GiB requested; none: nothing requested.
		"StorageGatewayStorageClassCapacityLow": `
load 1m
	storage_gateway_storage_class_capacity_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="fast", topology="zone=z1a"} 2147483648x10
	storage_gateway_storage_class_capacity_bytes{instance="p2", environment="a", region="r1", zone="z1", storage_class="fast", topology="zone=z1a"} 2147483648x10
	storage_gateway_storage_class_capacity_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="fast", topology="zone=z1b"} 3221225472x10
	storage_gateway_volume_requested_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="fast", status="RUNNING"} 64424509440x10
	storage_gateway_volume_requested_bytes{instance="p2", environment="a", region="r1", zone="z1", storage_class="fast", status="RUNNING"} 64424509440x10
	storage_gateway_volume_requested_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="fast", status="PROVISIONING"} 10737418240x10
	storage_gateway_storage_class_capacity_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="slow", topology=""} 107374182400x10
	storage_gateway_volume_requested_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="slow", status="RUNNING"} 10737418240x10
	storage_gateway_storage_class_capacity_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="none", topology=""} 1073741824x10

eval instant at 10m %s
	{environment="a", region="r1", zone="z1", storage_class="fast"} 0.06666666666666667
`,
		// Both replicas not ready.
		"StorageGatewayNoReplicaReady": `
load 1m
	storage_gateway_ready{instance="p1"} 0x10
	storage_gateway_ready{instance="p2"} 0x10

eval instant at 10m %s
	{} 0
`,
	} {
		t.Run(name, func(t *testing.T) {
			if expr[name] == "" {
				t.Fatalf("alerts.yaml has no alert %s", name)
			}
			promqltest.RunTest(t, strings.ReplaceAll(script, "%s", expr[name]), engine)
		})
	}

	// Healthy: nothing fires. No replica scraped at all: the replica alert
	// fires.
	quiet := `
load 1m
	storage_gateway_environment_up{instance="p1", environment="a", region="r1", zone="z1", state="DEGRADED"} 1x10
	storage_gateway_environment_credentials_expire_time_seconds{instance="p1", environment="a", region="r1", zone="z1"} 9999999x10
	storage_gateway_outbox_oldest_unsent_age_seconds{instance="p1"} 0x10
	storage_gateway_storage_class_capacity_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="fast", topology=""} 107374182400x10
	storage_gateway_volume_requested_bytes{instance="p1", environment="a", region="r1", zone="z1", storage_class="fast", status="RUNNING"} 10737418240x10
	storage_gateway_ready{instance="p1"} 0x10
	storage_gateway_ready{instance="p2"} 1x10
`
	for _, e := range expr {
		quiet += "\neval instant at 10m " + e + "\n"
	}
	promqltest.RunTest(t, quiet, engine)
	promqltest.RunTest(t, "load 1m\n\tunrelated_series 1x10\n\neval instant at 10m "+expr["StorageGatewayNoReplicaReady"]+"\n\t{} 0\n", engine)
}
