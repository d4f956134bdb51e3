//go:build tools

// Package csiprovisionertools pins the CSI external-provisioner sidecar the
// harness runs beside its CSI plugin.
package csiprovisionertools

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
