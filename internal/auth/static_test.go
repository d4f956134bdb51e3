package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/auth"
)

func writeTokenFile(t *testing.T, f auth.TokenFile) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStaticTokensMapToTheirPrincipalAndReload(t *testing.T) {
	var f auth.TokenFile
	admin, _, err := f.Add("alice", []auth.Role{auth.RoleAdmin}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	scoped, entry, err := f.Add("dashboards", []auth.Role{auth.RoleViewer}, []string{"east"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(admin, "sgw_") || len(admin) < 40 || admin == scoped {
		t.Fatalf("tokens %q %q", admin, scoped)
	}
	path := writeTokenFile(t, f)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), admin) || strings.Contains(string(raw), scoped) {
		t.Fatal("the token file holds a token, not only its hash")
	}
	tokens, err := auth.NewStaticTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tokens.Verify(context.Background(), admin)
	if err != nil || p.Subject != "alice" || p.Scoped() || p.Method != auth.MethodStatic || !p.HasAny([]auth.Role{auth.RoleAdmin}) {
		t.Fatalf("admin token: %+v %v", p, err)
	}
	p, err = tokens.Verify(context.Background(), scoped)
	if err != nil || p.Subject != "dashboards" || !p.InScope("east") || p.InScope("west") {
		t.Fatalf("scoped token: %+v %v", p, err)
	}
	for _, wrong := range []string{"", admin + "x", admin[:len(admin)-1], strings.ToUpper(admin)} {
		if _, err := tokens.Verify(context.Background(), wrong); err == nil {
			t.Fatalf("accepted %q", wrong)
		}
	}

	// Revoked on disk: still valid until the reload (SIGHUP), then gone.
	if !f.Revoke(entry.ID) || f.Revoke(entry.ID) {
		t.Fatal("revoke must report the entry once")
	}
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Verify(context.Background(), scoped); err != nil {
		t.Fatal("a revocation took effect before the reload")
	}
	if err := tokens.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Verify(context.Background(), scoped); err == nil {
		t.Fatal("a revoked token still verifies after the reload")
	}
	// A broken file on reload keeps the loaded tokens.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Reload(); err == nil {
		t.Fatal("a broken token file was loaded")
	}
	if _, err := tokens.Verify(context.Background(), admin); err != nil {
		t.Fatal("a failed reload dropped the tokens")
	}
}

func TestTokenFilesAreValidated(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	entry := func(mut func(*auth.StaticToken)) auth.TokenFile {
		tok := auth.StaticToken{ID: "abcdef123456", SHA256: hash, Subject: "s", Roles: []auth.Role{auth.RoleAdmin}}
		mut(&tok)
		return auth.TokenFile{Tokens: []auth.StaticToken{tok}}
	}
	for name, tc := range map[string]struct {
		file auth.TokenFile
		want string
	}{
		"unknown role":    {entry(func(s *auth.StaticToken) { s.Roles = []auth.Role{"root"} }), "tokens[0].roles[0]"},
		"no role":         {entry(func(s *auth.StaticToken) { s.Roles = nil }), "tokens[0].roles"},
		"bad hash":        {entry(func(s *auth.StaticToken) { s.SHA256 = "sgw_plaintext-token" }), "tokens[0].sha256"},
		"bad subject":     {entry(func(s *auth.StaticToken) { s.Subject = "a\nb" }), "tokens[0].subject"},
		"bad environment": {entry(func(s *auth.StaticToken) { s.Environments = []string{"East"} }), "tokens[0].environments[0]"},
		"bad id":          {entry(func(s *auth.StaticToken) { s.ID = "x" }), "tokens[0].id"},
		"duplicate id":    {auth.TokenFile{Tokens: append(entry(func(*auth.StaticToken) {}).Tokens, entry(func(*auth.StaticToken) {}).Tokens...)}, "tokens[1].id"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens.json")
			if err := tc.file.Write(path); err != nil {
				t.Fatal(err)
			}
			_, err := auth.ReadTokenFile(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not name %s", err, tc.want)
			}
			if strings.Contains(err.Error(), hash) {
				t.Fatal("the error repeats a hash")
			}
		})
	}
	t.Run("empty scope", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "tokens.json")
		raw := `{"tokens":[{"id":"abcdef123456","sha256":"` + hash + `","subject":"s","roles":["admin"],"environments":[]}]}`
		if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.ReadTokenFile(path); err == nil || !strings.Contains(err.Error(), "tokens[0].environments") {
			t.Fatalf("an empty scope was read: %v", err)
		}
	})
	t.Run("readable by others", func(t *testing.T) {
		path := writeTokenFile(t, auth.TokenFile{})
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.ReadTokenFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("a world-readable token file was read: %v", err)
		}
	})
}

func TestAuthenticatorModesAndTrustedNetworks(t *testing.T) {
	var f auth.TokenFile
	token, _, err := f.Add("ops", []auth.Role{auth.RoleViewer}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.NewStaticTokens(writeTokenFile(t, f))
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(auth.Options{Mode: auth.ModeStatic, Tokens: tokens,
		TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, TrustedHosts: []string{"gateway.example.com"}})
	request := func(peer, host string, headers ...string) (auth.Principal, error) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1alpha1/volumes", nil)
		r.RemoteAddr, r.Host = peer, host
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		return a.Authenticate(r)
	}
	if p, err := request("192.0.2.1:5000", "gateway.example.com", "Authorization", "Bearer "+token); err != nil || p.Subject != "ops" {
		t.Fatalf("bearer token: %+v %v", p, err)
	}
	if p, err := request("192.0.2.1:5000", "x", "authorization", "bearer "+token); err != nil || p.Subject != "ops" {
		t.Fatalf("the scheme is case-insensitive: %+v %v", p, err)
	}
	for _, header := range []string{"Basic b3BzOnB3", "Bearer", "Bearer ", "Bearer a b", token} {
		var invalid *auth.InvalidError
		if _, err := request("192.0.2.1:5000", "x", "Authorization", header); !errors.As(err, &invalid) {
			t.Errorf("Authorization %q: %v", header, err)
		}
	}
	// Two Authorization headers: which one counts would depend on who reads
	// them, so neither does.
	twice := httptest.NewRequest(http.MethodGet, "/api/v1alpha1/volumes", nil)
	twice.Header.Add("Authorization", "Bearer "+token)
	twice.Header.Add("Authorization", "Bearer sgw_other")
	var invalid *auth.InvalidError
	if p, err := a.Authenticate(twice); !errors.As(err, &invalid) {
		t.Errorf("two Authorization headers: %+v %v", p, err)
	}
	p, err := request("10.1.2.3:5000", "gateway.example.com:8080")
	if err != nil || p.Method != auth.MethodTrustedNetwork || !p.HasAny([]auth.Role{auth.RoleDCM}) || p.HasAny([]auth.Role{auth.RoleAdmin, auth.RoleViewer}) {
		t.Fatalf("trusted network: %+v %v", p, err)
	}
	for _, host := range []string{"10.0.0.5:8080", "[::1]:8080", "localhost"} {
		if _, err := request("10.1.2.3:5000", host); err != nil {
			t.Errorf("trusted network with Host %s: %v", host, err)
		}
	}
	for name, tc := range map[string][]string{
		// The TCP peer decides, never a header.
		"forwarded header":      {"192.0.2.1:5000", "gateway.example.com", "X-Forwarded-For", "10.1.2.3", "X-Real-Ip", "10.1.2.3", "Forwarded", "for=10.1.2.3"},
		"outside the network":   {"10.2.0.1:5000", "gateway.example.com"},
		"DNS-rebound host name": {"10.1.2.3:5000", "attacker.example.net"},
		"a token is no bypass":  {"10.1.2.3:5000", "gateway.example.com", "Authorization", "Bearer wrong"},
	} {
		p, err := request(tc[0], tc[1], tc[2:]...)
		if err == nil {
			t.Errorf("%s: admitted as %+v", name, p)
		}
	}
	if _, err := request("192.0.2.1:5000", "x"); !errors.Is(err, auth.ErrNoCredentials) {
		t.Fatalf("no credentials: %v", err)
	}

	open := auth.New(auth.Options{Mode: auth.ModeDisabled})
	if p, err := open.Authenticate(httptest.NewRequest(http.MethodDelete, "/x", nil)); err != nil || p.Method != auth.MethodDisabled || len(p.Roles) != 3 {
		t.Fatalf("disabled: %+v %v", p, err)
	}
}

func TestNarrowNeverWidensAScope(t *testing.T) {
	unscoped := auth.Principal{Subject: "a"}
	scoped := auth.Principal{Subject: "b", Environments: []string{"east", "west"}}
	for _, tc := range []struct {
		p      auth.Principal
		filter []string
		want   []string
	}{
		{unscoped, nil, nil},
		{unscoped, []string{"north"}, []string{"north"}},
		{scoped, nil, []string{"east", "west"}},
		{scoped, []string{"west", "north"}, []string{"west"}},
		{scoped, []string{"north"}, []string{}},
		{auth.Principal{Environments: []string{}}, nil, []string{}},
	} {
		got := tc.p.Narrow(tc.filter)
		if (got == nil) != (tc.want == nil) || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%v narrows %v to %#v, want %#v", tc.p.Environments, tc.filter, got, tc.want)
		}
	}
}
