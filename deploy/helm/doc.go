// Package helm holds the storage-gateway Helm chart (storage-gateway/) and
// its tests. The chart carries copies of the dashboard and alerting rules
// under deploy/ (Helm reads no file outside a chart); `make generate`
// refreshes them and the chart test fails when they differ. It also writes
// into the schema the SG_* names extraEnv may set (schemagen).
package helm

//go:generate cp ../grafana/storage-gateway.json ../prometheus/alerts.yaml storage-gateway/files/
//go:generate go run ./schemagen storage-gateway/values.schema.json
