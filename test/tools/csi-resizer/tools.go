//go:build tools

// Package csiresizertools pins the CSI external-resizer sidecar the harness
// runs beside its CSI plugin.
package csiresizertools

import _ "github.com/kubernetes-csi/external-resizer/cmd/csi-resizer"
