//go:build tools

// Package helm3tools pins the Helm 3 CLI, with which the operator's manual's
// helm lines must work as written (beside Helm 4, in test/tools/helm4).
package helm3tools

import _ "helm.sh/helm/v3/cmd/helm"
