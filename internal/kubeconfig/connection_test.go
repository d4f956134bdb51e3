package kubeconfig_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

// explicit returns valid explicit token credentials, changed by edit.
func explicit(edit func(*kubeconfig.Connection)) kubeconfig.Connection {
	c := kubeconfig.Connection{Server: "https://api.example.com:6443/", CAData: kubeconfigtest.Fixtures().CA, Token: "canary-secret-token"}
	edit(&c)
	return c
}

func TestNormalize(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	useCert := func(c *kubeconfig.Connection) { c.Token, c.ClientCertData, c.ClientKeyData = "", f.Cert, f.Key }
	cases := []struct {
		name          string
		edit          func(*kubeconfig.Connection)
		allowInsecure bool
		field         string // "" means valid
	}{
		{"token", func(*kubeconfig.Connection) {}, false, ""},
		{"client certificate", useCert, false, ""},
		{"system roots", func(c *kubeconfig.Connection) { c.CAData = nil }, false, ""},
		{"IPv6 server", func(c *kubeconfig.Connection) { c.Server = "https://[2001:db8::1]" }, false, ""},
		{"TLS server name", func(c *kubeconfig.Connection) { c.TLSServerName = "kubernetes.default.svc" }, false, ""},
		{"TLS server name IP", func(c *kubeconfig.Connection) { c.TLSServerName = "10.0.0.1" }, false, ""},
		{"insecure allowed", func(c *kubeconfig.Connection) { c.CAData, c.Insecure = nil, true }, true, ""},
		{"missing server", func(c *kubeconfig.Connection) { c.Server = "" }, false, "server"},
		{"http server", func(c *kubeconfig.Connection) { c.Server = "http://api.example.com" }, false, "server"},
		{"server with user info", func(c *kubeconfig.Connection) { c.Server = "https://u:canary-secret-token@api.example.com" }, false, "server"},
		{"server with path", func(c *kubeconfig.Connection) { c.Server = "https://api.example.com/k8s" }, false, "server"},
		{"server with empty host", func(c *kubeconfig.Connection) { c.Server = "https:///" }, false, "server"},
		{"server with bad port", func(c *kubeconfig.Connection) { c.Server = "https://api.example.com:99999" }, false, "server"},
		{"server with bad host", func(c *kubeconfig.Connection) { c.Server = "https://-api.example.com" }, false, "server"},
		{"CA not PEM", func(c *kubeconfig.Connection) { c.CAData = []byte(kubeconfigtest.B64(f.CA)) }, false, "certificate_authority_data"},
		{"CA is a key", func(c *kubeconfig.Connection) { c.CAData = f.Key }, false, "certificate_authority_data"},
		{"TLS server name with space", func(c *kubeconfig.Connection) { c.TLSServerName = "api example" }, false, "tls_server_name"},
		{"TLS server name too long", func(c *kubeconfig.Connection) { c.TLSServerName = strings.Repeat("a.", 127) + "io" }, false, "tls_server_name"},
		{"TLS server name with zone", func(c *kubeconfig.Connection) { c.TLSServerName = "fe80::1%eth0" }, false, "tls_server_name"},
		{"insecure not allowed", func(c *kubeconfig.Connection) { c.CAData, c.Insecure = nil, true }, false, "insecure_skip_tls_verify"},
		{"insecure with CA", func(c *kubeconfig.Connection) { c.Insecure = true }, true, "insecure_skip_tls_verify"},
		{"no credentials", func(c *kubeconfig.Connection) { c.Token = "" }, false, "token"},
		{"token and certificate", func(c *kubeconfig.Connection) { c.ClientCertData, c.ClientKeyData = f.Cert, f.Key }, false, "token"},
		{"token with space", func(c *kubeconfig.Connection) { c.Token = "Bearer canary-secret-token" }, false, "token"},
		{"token with newline", func(c *kubeconfig.Connection) { c.Token = "canary-secret-token\n" }, false, "token"},
		{"token too long", func(c *kubeconfig.Connection) { c.Token = strings.Repeat("t", 16<<10+1) }, false, "token"},
		{"certificate without key", func(c *kubeconfig.Connection) { useCert(c); c.ClientKeyData = nil }, false, "client_key_data"},
		{"key without certificate", func(c *kubeconfig.Connection) { useCert(c); c.ClientCertData = nil }, false, "client_certificate_data"},
		{"certificate base64 instead of PEM", func(c *kubeconfig.Connection) { useCert(c); c.ClientCertData = []byte(kubeconfigtest.B64(f.Cert)) }, false, "client_certificate_data"},
		{"key base64 instead of PEM", func(c *kubeconfig.Connection) { useCert(c); c.ClientKeyData = []byte(kubeconfigtest.B64(f.Key)) }, false, "client_key_data"},
		{"mismatched key", func(c *kubeconfig.Connection) { useCert(c); c.ClientKeyData = f.OtherKey }, false, "client_key_data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := explicit(tc.edit).Normalize(tc.allowInsecure)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Normalize() = %v, want nil", err)
				}
				return
			}
			requireFieldError(t, err, tc.field, "canary-secret-token", "api.example.com")
			if !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Errorf("error %q does not name exactly the field %q", err, tc.field)
			}
		})
	}
}

func TestAuthType(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	cases := map[string]struct {
		conn kubeconfig.Connection
		want string
	}{
		"token":              {kubeconfig.Connection{Token: "t"}, kubeconfig.AuthToken},
		"client certificate": {kubeconfig.Connection{ClientCertData: f.Cert, ClientKeyData: f.Key}, kubeconfig.AuthClientCertificate},
		"none":               {kubeconfig.Connection{}, ""},
	}
	for name, tc := range cases {
		if got := tc.conn.AuthType(); got != tc.want {
			t.Errorf("%s: AuthType() = %q, want %q", name, got, tc.want)
		}
	}
}

func TestCASHA256(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	sum := sha256.Sum256(f.CADER)
	want := hex.EncodeToString(sum[:])
	cases := map[string]struct {
		ca   []byte
		want string
	}{
		"one certificate":         {f.CA, want},
		"first of two":            {append(append([]byte{}, f.CA...), f.Cert...), want},
		"after a non-certificate": {append(append([]byte{}, f.Key...), f.CA...), want},
		"no CA":                   {nil, ""},
		"not PEM":                 {[]byte("junk"), ""},
	}
	for name, tc := range cases {
		if got := (kubeconfig.Connection{CAData: tc.ca}).CASHA256(); got != tc.want {
			t.Errorf("%s: CASHA256() = %q, want %q", name, got, tc.want)
		}
	}
}

func TestEqual(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	base := kubeconfig.Connection{
		Server: "https://a", CAData: f.CA, TLSServerName: "a", Token: "t",
		ClientCertData: f.Cert, ClientKeyData: f.Key,
	}
	differ := map[string]func(*kubeconfig.Connection){
		"server":          func(c *kubeconfig.Connection) { c.Server = "https://b" },
		"CA":              func(c *kubeconfig.Connection) { c.CAData = f.Cert },
		"TLS server name": func(c *kubeconfig.Connection) { c.TLSServerName = "b" },
		"insecure":        func(c *kubeconfig.Connection) { c.Insecure = true },
		"token":           func(c *kubeconfig.Connection) { c.Token = "u" },
		"token length":    func(c *kubeconfig.Connection) { c.Token = "tt" },
		"certificate":     func(c *kubeconfig.Connection) { c.ClientCertData = f.CA },
		"key":             func(c *kubeconfig.Connection) { c.ClientKeyData = f.OtherKey },
		"key missing":     func(c *kubeconfig.Connection) { c.ClientKeyData = nil },
	}
	if !base.Equal(base) {
		t.Error("connection is not equal to itself")
	}
	for name, edit := range differ {
		other := base
		edit(&other)
		if base.Equal(other) || other.Equal(base) {
			t.Errorf("connections differing in %s compare equal", name)
		}
	}
	empty := kubeconfig.Connection{CAData: []byte{}, ClientKeyData: []byte{}}
	if !empty.Equal(kubeconfig.Connection{}) {
		t.Error("empty and nil byte slices should compare equal")
	}
}

func TestNormalizeSpellsTheServerOneWay(t *testing.T) {
	c, err := kubeconfig.Connection{Server: "https://API.Example.com:06443/", Token: "t0ken"}.Normalize(false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "https://api.example.com:6443" {
		t.Fatalf("server = %q", c.Server)
	}
}

func TestFormattingAndLoggingRedactCredentials(t *testing.T) {
	c := kubeconfig.Connection{Server: "https://api.example.com", Token: "format-canary-token", ClientKeyData: []byte("key-canary")}
	var logs strings.Builder
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "conn", c, "ptr", &c)
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%v", &c), logs.String()} {
		if strings.Contains(out, "canary") {
			t.Fatalf("credentials printed: %s", out)
		}
		if !strings.Contains(out, "https://api.example.com") {
			t.Fatalf("redacted form lost the server: %s", out)
		}
	}
}
