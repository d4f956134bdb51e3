//go:build tools

// Package snapshottertools pins the snapshot controller and the CSI
// snapshotter sidecar the harness runs beside its CSI plugin.
package snapshottertools

import (
	_ "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
