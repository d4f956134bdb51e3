package kubeconfig_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// fixture holds the key material substituted for {{CA}}, {{CERT}}, {{KEY}}
// and {{OTHERKEY}}, as raw PEM.
type fixture struct {
	caDER    []byte
	ca       []byte
	cert     []byte
	key      []byte
	otherKey []byte
}

// pki is generated once per test binary: ECDSA P-256 keys are cheap, but the
// fuzz target would otherwise regenerate them per worker.
var pki = sync.OnceValue(newFixture)

func newFixture() fixture {
	caKey, clientKey, otherKey := newKey(), newKey(), newKey()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubeconfig test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER := createCertificate(caTemplate, caTemplate, caKey, caKey)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		panic(err)
	}
	clientTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "admin"},
		NotBefore:    caTemplate.NotBefore,
		NotAfter:     caTemplate.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return fixture{
		caDER:    caDER,
		ca:       pemBlock("CERTIFICATE", caDER),
		cert:     pemBlock("CERTIFICATE", createCertificate(clientTemplate, caCert, clientKey, caKey)),
		key:      pkcs8PEM(clientKey),
		otherKey: pkcs8PEM(otherKey),
	}
}

func newKey() *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return key
}

func createCertificate(template, parent *x509.Certificate, key, signer *ecdsa.PrivateKey) []byte {
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, signer)
	if err != nil {
		panic(err)
	}
	return der
}

func pkcs8PEM(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	return pemBlock("PRIVATE KEY", der)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func b64(data []byte) string {
	return base64.StdEncoding.EncodeToString(data)
}

// env holds the per-test values substituted for {{DIR}}, {{ADDR}} and
// {{TOKEN}}; the README in testdata/malicious documents every placeholder.
type env struct {
	dir   string
	addr  string
	token string
}

// newEnv returns an environment with a fresh canary token and a directory and
// address that nothing listens on; the isolation test supplies real ones.
func newEnv(t testing.TB) env {
	return env{dir: t.TempDir(), addr: "127.0.0.1:9", token: newCanary()}
}

func newCanary() string {
	random := make([]byte, 16)
	if _, err := rand.Read(random); err != nil {
		panic(err)
	}
	return "canary-" + hex.EncodeToString(random)
}

// expand substitutes every placeholder in a testdata template.
func (e env) expand(template string) []byte {
	f := pki()
	return []byte(strings.NewReplacer(
		"{{DIR}}", e.dir,
		"{{ADDR}}", e.addr,
		"{{SERVER}}", "https://"+e.addr,
		"{{CA}}", b64(f.ca),
		"{{CERT}}", b64(f.cert),
		"{{KEY}}", b64(f.key),
		"{{OTHERKEY}}", b64(f.otherKey),
		"{{TOKEN}}", e.token,
	).Replace(template))
}

// secrets are the strings no error may contain.
func (e env) secrets() []string {
	return []string{e.token, strings.TrimPrefix(e.token, "canary-"), e.dir, e.addr}
}

// testFile is one testdata template; want is the field from its "# want:"
// line (malicious files only).
type testFile struct {
	name     string
	template string
	want     string
}

func readTestFiles(t testing.TB, dir string) []testFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no testdata in %s: %v", dir, err)
	}
	files := make([]testFile, 0, len(paths))
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		want, _ := strings.CutPrefix(first, "# want:")
		files = append(files, testFile{
			name:     strings.TrimSuffix(filepath.Base(path), ".yaml"),
			template: string(data),
			want:     strings.TrimSpace(want),
		})
	}
	return files
}

// requireFieldError asserts that err is a *FieldError whose field contains
// want and whose text leaks none of the given strings.
func requireFieldError(t testing.TB, err error, want string, leaks ...string) {
	t.Helper()
	var fe *kubeconfig.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v (%T), want *kubeconfig.FieldError", err, err)
	}
	if !strings.Contains(fe.Field, want) {
		t.Errorf("field = %q, want it to contain %q (error: %v)", fe.Field, want, err)
	}
	for _, leak := range leaks {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("error %q leaks input %q", err, leak)
		}
	}
}
