//go:build tools

// Package spmtools pins DCM's service-provider-manager, the real peer the
// gateway's DCM interoperability tests run against.
package spmtools

import _ "github.com/dcm-project/service-provider-manager/cmd/service-provider-manager"
