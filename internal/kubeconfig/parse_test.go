package kubeconfig_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

func TestParseRejectsMaliciousFiles(t *testing.T) {
	files := kubeconfigtest.Files(t, "malicious")
	if len(files) < 68 {
		t.Fatalf("%d malicious files, want at least the 68 of the corpus", len(files))
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			if !strings.HasPrefix(f.Template, "# want:") {
				t.Fatal(`first line must be "# want: <field>"`)
			}
			e := kubeconfigtest.NewEnv(t)
			_, err := kubeconfig.Parse(e.Expand(f.Template), kubeconfig.Options{})
			requireFieldError(t, err, f.Want, e.Secrets()...)
		})
	}
}

// tokenConfig is a valid kubeconfig that the rejection table mutates one
// string at a time.
const tokenConfig = `apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: {{SERVER}}
    certificate-authority-data: {{CA}}
users:
- name: admin
  user:
    token: {{TOKEN}}
contexts:
- name: prod
  context:
    cluster: prod
    user: admin
    namespace: team-a
current-context: prod
`

// clusterBlock is the clusters list of tokenConfig.
const clusterBlock = "clusters:\n- name: prod\n  cluster:\n    server: {{SERVER}}\n    certificate-authority-data: {{CA}}\n"

func TestParseRejects(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	certUser := "client-certificate-data: " + kubeconfigtest.B64(f.Cert) + "\n    client-key-data: "
	cases := []struct {
		name  string
		old   string // replaced by new in tokenConfig; "" replaces the whole document
		new   string
		opts  kubeconfig.Options
		field string
	}{
		{"larger than MaxSize", "kind: Config", "kind: Config\n#" + strings.Repeat("x", kubeconfig.MaxSize), kubeconfig.Options{}, ""},
		{"null document", "", "~\n", kubeconfig.Options{}, ""},
		{"invalid UTF-8", "kind: Config", "kind: Config\nx: \"\xff\xfe\"", kubeconfig.Options{}, ""},
		{"broken second document", "", tokenConfig + "---\n[", kubeconfig.Options{}, ""},
		{"flow mapping key", "kind: Config", "kind: Config\n? [a, b]\n: c", kubeconfig.Options{}, ""},
		{"long unknown key is not echoed", "kind: Config", "kind: Config\n{{TOKEN}}: x", kubeconfig.Options{}, "<key>"},
		{"unknown entry key", "- name: prod\n  cluster:", "- name: prod\n  kind: x\n  cluster:", kubeconfig.Options{}, "clusters[0].kind"},
		{"clusters not a list", clusterBlock, "clusters: {}\n", kubeconfig.Options{}, "clusters"},
		{"cluster not a mapping", clusterBlock, "clusters:\n- name: prod\n  cluster: [a]\n", kubeconfig.Options{}, "clusters[0].cluster"},
		{"server not a string", "server: {{SERVER}}", "server: [{{SERVER}}]", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"quoted boolean", "server: {{SERVER}}", "server: {{SERVER}}\n    disable-compression: \"true\"", kubeconfig.Options{}, "clusters[0].cluster.disable-compression"},
		{"name with control character", "- name: prod\n  cluster:", "- name: \"prod\\u0007\"\n  cluster:", kubeconfig.Options{}, "clusters[0].name"},
		{"name too long", "- name: admin", "- name: " + strings.Repeat("a", 254), kubeconfig.Options{}, "users[0].name"},
		{"requested context missing", "", tokenConfig, kubeconfig.Options{Context: "staging"}, "contexts"},
		{"context without user", "    user: admin\n", "", kubeconfig.Options{}, "contexts[0].context.user"},
		{"namespace too long", "team-a", strings.Repeat("a", 64), kubeconfig.Options{}, "contexts[0].context.namespace"},
		{"insecure with CA when allowed", "server: {{SERVER}}", "server: {{SERVER}}\n    insecure-skip-tls-verify: true", kubeconfig.Options{AllowInsecure: true}, "clusters[0].cluster.insecure-skip-tls-verify"},
		{"server with unbracketed IPv6", "{{SERVER}}", "https://::1", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server with bracketed name", "{{SERVER}}", "https://[example.com]", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server with port 0", "{{SERVER}}", "https://example.com:0", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server with numeric TLD", "{{SERVER}}", "https://999.1.1.1", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server with empty query", "{{SERVER}}", "{{SERVER}}?", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server with empty fragment", "{{SERVER}}", "{{SERVER}}#", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server with encoded path", "{{SERVER}}", "{{SERVER}}/%2F", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server uppercase scheme", "{{SERVER}}", "HTTPS://example.com", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"server opaque", "{{SERVER}}", "https:example.com", kubeconfig.Options{}, "clusters[0].cluster.server"},
		{"token too long", "{{TOKEN}}", strings.Repeat("t", 16<<10+1), kubeconfig.Options{}, "users[0].user.token"},
		{"token with control character", "{{TOKEN}}", "\"{{TOKEN}}\\t\"", kubeconfig.Options{}, "users[0].user.token"},
		{"token non-ASCII", "{{TOKEN}}", "{{TOKEN}}é", kubeconfig.Options{}, "users[0].user.token"},
		{"CA with trailing garbage", "{{CA}}", kubeconfigtest.B64(append(f.CA, "garbage"...)), kubeconfig.Options{}, "clusters[0].cluster.certificate-authority-data"},
		{"CA with leading garbage", "{{CA}}", kubeconfigtest.B64(append([]byte("garbage\n"), f.CA...)), kubeconfig.Options{}, "clusters[0].cluster.certificate-authority-data"},
		{"CA hiding a malformed block", "{{CA}}", kubeconfigtest.B64(append([]byte("-----BEGIN CERTIFICATE-----\n!!\n"), f.CA...)), kubeconfig.Options{}, "clusters[0].cluster.certificate-authority-data"},
		{"CA that does not parse", "{{CA}}", kubeconfigtest.B64(kubeconfigtest.PEMBlock("CERTIFICATE", []byte("not DER"))), kubeconfig.Options{}, "clusters[0].cluster.certificate-authority-data"},
		{"CA with a private key", "{{CA}}", kubeconfigtest.B64(append(f.CA, f.Key...)), kubeconfig.Options{}, "clusters[0].cluster.certificate-authority-data"},
		{"CA base64 URL encoding", "{{CA}}", strings.NewReplacer("+", "-", "/", "_").Replace(kubeconfigtest.B64(f.CA)) + "_-", kubeconfig.Options{}, "clusters[0].cluster.certificate-authority-data"},
		{"key with PEM headers", "token: {{TOKEN}}", certUser + kubeconfigtest.B64([]byte(strings.Replace(string(f.Key), "KEY-----\n", "KEY-----\nProc-Type: 4,ENCRYPTED\n\n", 1))), kubeconfig.Options{}, "users[0].user.client-key-data"},
		{"two keys", "token: {{TOKEN}}", certUser + kubeconfigtest.B64(append(f.Key, f.OtherKey...)), kubeconfig.Options{}, "users[0].user.client-key-data"},
		{"key block that does not parse", "token: {{TOKEN}}", certUser + kubeconfigtest.B64(kubeconfigtest.PEMBlock("PRIVATE KEY", []byte("junk"))), kubeconfig.Options{}, "users[0].user.client-key-data"},
		{"certificate is a key", "token: {{TOKEN}}", "client-certificate-data: " + kubeconfigtest.B64(f.Key) + "\n    client-key-data: " + kubeconfigtest.B64(f.Key), kubeconfig.Options{}, "users[0].user.client-certificate-data"},
		{"key without certificate", "token: {{TOKEN}}", "client-key-data: " + kubeconfigtest.B64(f.Key), kubeconfig.Options{}, "users[0].user.client-certificate-data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.new
			if tc.old != "" {
				if !strings.Contains(tokenConfig, tc.old) {
					t.Fatalf("tokenConfig does not contain %q", tc.old)
				}
				doc = strings.Replace(tokenConfig, tc.old, tc.new, 1)
			}
			e := kubeconfigtest.NewEnv(t)
			_, err := kubeconfig.Parse(e.Expand(doc), tc.opts)
			requireFieldError(t, err, tc.field, e.Secrets()...)
		})
	}
}

func TestParseSizeLimitIsInclusive(t *testing.T) {
	doc := kubeconfigtest.NewEnv(t).Expand(tokenConfig)
	doc = append(doc, '#')
	doc = append(doc, strings.Repeat("x", kubeconfig.MaxSize-len(doc))...)
	if _, err := kubeconfig.Parse(doc, kubeconfig.Options{}); err != nil {
		t.Fatalf("document of exactly MaxSize: %v", err)
	}
}

func TestParseAcceptsValidFiles(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	caSum := sha256.Sum256(f.CADER)
	caSHA := hex.EncodeToString(caSum[:])
	const self = "https://127.0.0.1:9"
	cases := []struct {
		file      string
		opts      kubeconfig.Options
		server    string
		context   string
		namespace string
		auth      string
		caSHA     string
		insecure  bool
		sni       string
	}{
		{"token", kubeconfig.Options{}, self, "prod", "team-a", kubeconfig.AuthToken, caSHA, false, ""},
		{"client-certificate", kubeconfig.Options{}, self, "prod", "", kubeconfig.AuthClientCertificate, caSHA, false, "api.prod.example.com"},
		{"multiple-contexts", kubeconfig.Options{}, self, "prod", "team-a", kubeconfig.AuthToken, caSHA, false, ""},
		{"multiple-contexts", kubeconfig.Options{Context: "staging"}, "https://staging.example.com:6443", "staging", "team-b", kubeconfig.AuthClientCertificate, caSHA, false, ""},
		{"ipv6", kubeconfig.Options{}, "https://[::1]:6443", "local", "", kubeconfig.AuthToken, "", false, ""},
		{"insecure", kubeconfig.Options{AllowInsecure: true}, self, "lab", "", kubeconfig.AuthToken, "", true, ""},
		{"json", kubeconfig.Options{}, self, "prod", "", kubeconfig.AuthToken, caSHA, false, ""},
	}
	files := map[string]string{}
	for _, file := range kubeconfigtest.Files(t, "valid") {
		files[file.Name] = file.Template
	}
	for _, tc := range cases {
		t.Run(tc.file+"/"+tc.opts.Context, func(t *testing.T) {
			e := kubeconfigtest.NewEnv(t)
			got, err := kubeconfig.Parse(e.Expand(files[tc.file]), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			c := got.Connection
			checks := []struct {
				what      string
				got, want any
			}{
				{"server", c.Server, tc.server},
				{"context", got.Context, tc.context},
				{"namespace", got.Namespace, tc.namespace},
				{"auth type", c.AuthType(), tc.auth},
				{"CA SHA-256", c.CASHA256(), tc.caSHA},
				{"insecure", c.Insecure, tc.insecure},
				{"TLS server name", c.TLSServerName, tc.sni},
			}
			for _, check := range checks {
				if check.got != check.want {
					t.Errorf("%s = %v, want %v", check.what, check.got, check.want)
				}
			}
			if _, err := c.Normalize(tc.opts.AllowInsecure); err != nil {
				t.Errorf("parsed connection fails Normalize: %v", err)
			}
		})
	}
}

func TestParseReturnsCredentials(t *testing.T) {
	f := kubeconfigtest.Fixtures()
	e := kubeconfigtest.NewEnv(t)
	got, err := kubeconfig.Parse(e.Expand(tokenConfig), kubeconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := kubeconfig.Connection{Server: "https://" + e.Addr, CAData: f.CA, Token: e.Token}
	if !got.Connection.Equal(want) {
		t.Errorf("connection = %+v, want %+v", got.Connection, want)
	}
	cert := strings.Replace(tokenConfig, "token: {{TOKEN}}", "client-certificate-data: {{CERT}}\n    client-key-data: {{KEY}}", 1)
	got, err = kubeconfig.Parse(e.Expand(cert), kubeconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want = kubeconfig.Connection{Server: "https://" + e.Addr, CAData: f.CA, ClientCertData: f.Cert, ClientKeyData: f.Key}
	if !got.Connection.Equal(want) {
		t.Errorf("connection = %+v, want %+v", got.Connection, want)
	}
}

func TestFieldErrorText(t *testing.T) {
	cases := []struct {
		err  kubeconfig.FieldError
		want string
	}{
		{kubeconfig.FieldError{Field: "users[0].user.exec", Reason: "exec plugins are not accepted (they run commands)"}, "users[0].user.exec: exec plugins are not accepted (they run commands)"},
		{kubeconfig.FieldError{Reason: "empty document"}, "empty document"},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}
