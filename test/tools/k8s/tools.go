//go:build tools

// Package k8stools pins the Kubernetes control-plane commands the harness builds.
package k8stools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
