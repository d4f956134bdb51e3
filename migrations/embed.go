// Package migrations holds the gateway's ordered SQL schema migrations (goose
// format) and embeds them into the binary, so `storage-gateway migrate` and
// `serve` never depend on files on disk.
package migrations

import "embed"

// FS holds every *.sql migration in this directory.
//
//go:embed *.sql
var FS embed.FS
