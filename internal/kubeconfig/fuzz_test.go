package kubeconfig_test

import (
	"bytes"
	"errors"
	"net/url"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

// kubeconfigKeys are the kubeconfig key names errors may spell out, longest
// first so that removing them never leaves a fragment of a longer one.
var kubeconfigKeys = []string{
	"certificate-authority-data", "client-certificate-data", "insecure-skip-tls-verify",
	"certificate-authority", "disable-compression", "client-certificate", "client-key-data",
	"current-context", "tls-server-name", "as-user-extra", "auth-provider", "preferences",
	"apiVersion", "client-key", "extensions", "as-groups", "namespace", "proxy-url", "tokenFile",
	"clusters", "contexts", "password", "username", "cluster", "context", "as-uid", "server",
	"token", "users", "exec", "kind", "name", "user", "as",
}

// maxErrorLen bounds error texts: a message that grows with the input is a
// sign that input is being echoed.
const maxErrorLen = 200

func FuzzParse(f *testing.F) {
	e := kubeconfigtest.Env{Dir: "/tmp/fuzz-dir", Addr: "127.0.0.1:6443", Token: "canary-fuzz-token-0123456789abcdef"}
	for _, dir := range []string{"valid", "malicious"} {
		for _, file := range kubeconfigtest.Files(f, dir) {
			f.Add(e.Expand(file.Template))
		}
	}
	f.Add(e.Expand(tokenConfig))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, allow := range []bool{false, true} {
			parsed, err := kubeconfig.Parse(data, kubeconfig.Options{AllowInsecure: allow})
			if err != nil {
				checkRejection(t, data, err)
				continue
			}
			checkAccepted(t, parsed.Connection, allow)
		}
	})
}

// checkRejection requires a bounded *FieldError that quotes no input line
// longer than 20 bytes, not counting kubeconfig key names, which errors
// legitimately name.
func checkRejection(t *testing.T, data []byte, err error) {
	var fe *kubeconfig.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FieldError", err, err)
	}
	text := []byte(err.Error())
	if len(text) > maxErrorLen {
		t.Fatalf("error text is %d bytes: %q", len(text), text)
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(withoutKeys(line)) > 20 && bytes.Contains(text, line) {
			t.Fatalf("error %q quotes input line %q", text, line)
		}
	}
}

// checkAccepted requires the invariants every parsed connection must hold.
func checkAccepted(t *testing.T, c kubeconfig.Connection, allowInsecure bool) {
	u, err := url.Parse(c.Server)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		t.Fatalf("server %q is not an https URL with a host", c.Server)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Path != "":
		t.Fatalf("server %q has user info, query, fragment or path", c.Server)
	case c.Insecure && !allowInsecure:
		t.Fatal("insecure connection accepted while not allowed")
	}
	hasToken, hasCert := c.Token != "", len(c.ClientCertData) > 0 && len(c.ClientKeyData) > 0
	if hasToken == hasCert || c.AuthType() == "" {
		t.Fatalf("want exactly one complete credential, got token=%v certificate=%v", hasToken, hasCert)
	}
	if _, err := c.Normalize(allowInsecure); err != nil {
		t.Fatalf("parsed connection fails Normalize: %v", err)
	}
}

func withoutKeys(line []byte) []byte {
	for _, key := range kubeconfigKeys {
		line = bytes.ReplaceAll(line, []byte(key), nil)
	}
	return line
}
