package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/auth"
)

// adminToken is the bearer token the tests' requests send; testAuth accepts
// it as the admin role.
const adminToken = "sgw_api-test-admin-token"

// staticToken is a token file entry for token.
func staticToken(token, subject string, roles ...auth.Role) auth.StaticToken {
	sum := sha256.Sum256([]byte(token))
	id := hex.EncodeToString(sum[:6])
	return auth.StaticToken{ID: id, SHA256: hex.EncodeToString(sum[:]), Subject: subject, Roles: roles}
}

// testAuth authenticates static tokens: adminToken, and extra.
func testAuth(tb testing.TB, extra ...auth.StaticToken) *auth.Authenticator {
	tb.Helper()
	return auth.New(auth.Options{Mode: auth.ModeStatic, Tokens: testTokens(tb, extra...)})
}

// testTokens are the static tokens of testAuth.
func testTokens(tb testing.TB, extra ...auth.StaticToken) *auth.StaticTokens {
	tb.Helper()
	f := auth.TokenFile{Tokens: append([]auth.StaticToken{staticToken(adminToken, "api-test", auth.RoleAdmin)}, extra...)}
	path := filepath.Join(tb.TempDir(), "tokens.json")
	if err := f.Write(path); err != nil {
		tb.Fatal(err)
	}
	tokens, err := auth.NewStaticTokens(path)
	if err != nil {
		tb.Fatal(err)
	}
	return tokens
}

// testAudit is an audit log on db; tests that never change anything pass nil.
func testAudit(db *pgxpool.Pool, logger *slog.Logger) *auth.AuditLog {
	return auth.NewAuditLog(auth.AuditOptions{DB: db, Logger: logger, Retention: 24 * time.Hour})
}
