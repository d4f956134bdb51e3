//go:build tools

// Package etcdtools pins the etcd server the harness builds.
package etcdtools

import _ "go.etcd.io/etcd/server/v3"
