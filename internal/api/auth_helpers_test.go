package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/auth"
)

// adminToken is the bearer token the tests' requests send; testAuth accepts
// it as the admin role.
const adminToken = "sgw_api-test-admin-token"

// testAuth authenticates static tokens, adminToken among them.
func testAuth(tb testing.TB) *auth.Authenticator {
	tb.Helper()
	sum := sha256.Sum256([]byte(adminToken))
	f := auth.TokenFile{Tokens: []auth.StaticToken{{ID: "apitestadmin", SHA256: hex.EncodeToString(sum[:]), Subject: "api-test",
		Roles: []auth.Role{auth.RoleAdmin}}}}
	path := filepath.Join(tb.TempDir(), "tokens.json")
	if err := f.Write(path); err != nil {
		tb.Fatal(err)
	}
	tokens, err := auth.NewStaticTokens(path)
	if err != nil {
		tb.Fatal(err)
	}
	return auth.New(auth.Options{Mode: auth.ModeStatic, Tokens: tokens})
}

// testAudit is an audit log on db; tests that never change anything pass nil.
func testAudit(db *pgxpool.Pool, logger *slog.Logger) *auth.AuditLog {
	return auth.NewAuditLog(db, logger, 24*60*60*1e9)
}
