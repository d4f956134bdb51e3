package main_test

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/dcm-project/storage-gateway/test/oidctest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// A key the identity provider withdrew stops admitting tokens the moment
// the gateway is sent SIGHUP: the key set is read again and verified tokens
// are forgotten.
func TestSIGHUPReadsTheIssuersKeysAgain(t *testing.T) {
	issuer := oidctest.Start(t)
	g := startGateway(t, map[string]string{"SG_DATABASE_URL": pgtest.NewDatabase(t).URL,
		"SG_AUTH_MODE": "oidc", "SG_OIDC_ISSUER_URL": issuer.URL})
	token := issuer.Token(t, issuer.Claims("alice", "viewer"))
	if code := g.authGet(t, "/api/v1alpha1/environments", token); code != http.StatusOK {
		t.Fatalf("a valid token: %d", code)
	}
	withdrawn := issuer.SigningKeyID()
	issuer.AddKey(t, jose.RS256)
	issuer.RemoveKey(withdrawn)
	if code := g.authGet(t, "/api/v1alpha1/environments", token); code != http.StatusOK {
		t.Fatalf("before SIGHUP the verified token is still served: %d", code)
	}
	if err := g.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.WaitLog(t, "tokens reloaded", 10*time.Second)
	if code := g.authGet(t, "/api/v1alpha1/environments", token); code != http.StatusUnauthorized {
		t.Fatalf("a token of the withdrawn key after SIGHUP: %d, want 401", code)
	}
	if code := g.authGet(t, "/api/v1alpha1/environments", issuer.Token(t, issuer.Claims("bob", "viewer"))); code != http.StatusOK {
		t.Fatalf("a token of the new key after SIGHUP: %d", code)
	}
}
