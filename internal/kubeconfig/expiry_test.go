package kubeconfig_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

// jwtWith signs a JWT with the given claims, as a cluster's token issuer
// would (the gateway never checks the signature).
func jwtWith(t *testing.T, claims josejwt.Claims) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, err := josejwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func TestCredentialsExpiry(t *testing.T) {
	exp := time.Now().Add(90 * time.Minute).Truncate(time.Second).UTC()
	f := kubeconfigtest.Fixtures()
	for name, tc := range map[string]struct {
		conn kubeconfig.Connection
		want time.Time
		ok   bool
	}{
		"a TokenRequest token": {kubeconfig.Connection{Token: jwtWith(t, josejwt.Claims{Subject: "system:serviceaccount:sg:gw", Expiry: josejwt.NewNumericDate(exp)})}, exp, true},
		"a JWT without exp":    {kubeconfig.Connection{Token: jwtWith(t, josejwt.Claims{Subject: "legacy"})}, time.Time{}, false},
		"an opaque token":      {kubeconfig.Connection{Token: "sha256~opaque-token-of-an-oauth-server"}, time.Time{}, false},
		"three dots of junk":   {kubeconfig.Connection{Token: "a.b.c"}, time.Time{}, false},
	} {
		got, ok := tc.conn.CredentialsExpiry()
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("%s: expiry %v, %v; want %v, %v", name, got, ok, tc.want, tc.ok)
		}
	}
	// The fixture's client certificate is valid for a day.
	got, ok := kubeconfig.Connection{ClientCertData: f.Cert, ClientKeyData: f.Key}.CredentialsExpiry()
	if !ok || got.Before(time.Now().Add(23*time.Hour)) || got.After(time.Now().Add(25*time.Hour)) {
		t.Fatalf("client certificate expiry %v, %v; want about a day from now", got, ok)
	}
}

// A token's subject is read as its expiry is, so a ServiceAccount's token
// is told apart; anything that is not a JWT has none.
func TestTokenSubject(t *testing.T) {
	for _, tc := range []struct {
		conn kubeconfig.Connection
		want string
	}{
		{kubeconfig.Connection{Token: jwtWith(t, josejwt.Claims{Subject: "system:serviceaccount:sg:gw"})}, "system:serviceaccount:sg:gw"},
		{kubeconfig.Connection{Token: "sha256~opaque-token-of-an-oauth-server"}, ""},
		{kubeconfig.Connection{Token: "a.b.c"}, ""},
		{kubeconfig.Connection{}, ""},
	} {
		if got := tc.conn.TokenSubject(); got != tc.want {
			t.Errorf("TokenSubject of %.20q = %q, want %q", tc.conn.Token, got, tc.want)
		}
	}
}
