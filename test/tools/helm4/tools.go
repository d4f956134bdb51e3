//go:build tools

// Package helm4tools pins the Helm 4 CLI, with which the operator's manual's
// helm lines must work as written (beside Helm 3, in test/tools/helm3).
package helm4tools

import _ "helm.sh/helm/v4/cmd/helm"
