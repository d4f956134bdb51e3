// Module crds pins the third-party CustomResourceDefinitions the chart's
// optional objects need (ServiceMonitor and PrometheusRule from the
// Prometheus Operator, Route from OpenShift). The chart test reads them from
// these modules, fetched through the Go module proxy and verified against
// go.sum, and installs them on a harness API server; nothing here is built.
module github.com/dcm-project/storage-gateway/test/tools/crds

go 1.26.0

require (
	github.com/openshift/api v0.0.0-20260709102940-580f1c1ba691
	github.com/prometheus-operator/prometheus-operator v0.85.0
)
