// Package kubeconfigtest provides the kubeconfig test corpus to every test
// that needs it: key material, the placeholder expansion documented in
// ../testdata/malicious/README.md and the malicious and valid files. The
// parser's own tests and the API's tests use the same hostile inputs. It
// must never be imported by production code.
package kubeconfigtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"
)

// PKI is the key material substituted for {{CA}}, {{CERT}}, {{KEY}} and
// {{OTHERKEY}}, as raw PEM.
type PKI struct {
	CADER    []byte
	CA       []byte
	Cert     []byte
	Key      []byte
	OtherKey []byte
}

// Fixtures is generated once per test binary: ECDSA P-256 keys are cheap, but
// a fuzz target would otherwise regenerate them per worker.
var Fixtures = sync.OnceValue(newPKI)

func newPKI() PKI {
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
	return PKI{
		CADER:    caDER,
		CA:       PEMBlock("CERTIFICATE", caDER),
		Cert:     PEMBlock("CERTIFICATE", createCertificate(clientTemplate, caCert, clientKey, caKey)),
		Key:      pkcs8PEM(clientKey),
		OtherKey: pkcs8PEM(otherKey),
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
	return PEMBlock("PRIVATE KEY", der)
}

// PEMBlock encodes one PEM block.
func PEMBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// B64 is the standard base64 a kubeconfig's *-data fields hold.
func B64(data []byte) string {
	return base64.StdEncoding.EncodeToString(data)
}

// Env holds the per-test values substituted for {{DIR}}, {{ADDR}} and
// {{TOKEN}}.
type Env struct {
	Dir   string
	Addr  string
	Token string
}

// NewEnv returns an environment with a fresh canary token and a directory and
// address that nothing listens on; isolation tests supply real ones.
func NewEnv(t testing.TB) Env {
	return Env{Dir: t.TempDir(), Addr: "127.0.0.1:9", Token: NewCanary()}
}

// NewCanary returns a unique token to search outputs for.
func NewCanary() string {
	random := make([]byte, 16)
	if _, err := rand.Read(random); err != nil {
		panic(err)
	}
	return "canary-" + hex.EncodeToString(random)
}

// Expand substitutes every placeholder in a testdata template.
func (e Env) Expand(template string) []byte {
	f := Fixtures()
	return []byte(strings.NewReplacer(
		"{{DIR}}", e.Dir,
		"{{ADDR}}", e.Addr,
		"{{SERVER}}", "https://"+e.Addr,
		"{{CA}}", B64(f.CA),
		"{{CERT}}", B64(f.Cert),
		"{{KEY}}", B64(f.Key),
		"{{OTHERKEY}}", B64(f.OtherKey),
		"{{TOKEN}}", e.Token,
	).Replace(template))
}

// Secrets are the strings no error, response or log line may contain.
func (e Env) Secrets() []string {
	return []string{e.Token, strings.TrimPrefix(e.Token, "canary-"), e.Dir, e.Addr}
}

// File is one testdata template; Want is the field from its "# want:" line
// (malicious files only).
type File struct {
	Name     string
	Template string
	Want     string
}

// Files reads testdata/<set>/*.yaml of the kubeconfig package ("malicious"
// or "valid").
func Files(t testing.TB, set string) []File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(repo.Root(), "internal", "kubeconfig", "testdata", set, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no testdata in %s: %v", set, err)
	}
	files := make([]File, 0, len(paths))
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		want, _ := strings.CutPrefix(first, "# want:")
		files = append(files, File{
			Name:     strings.TrimSuffix(filepath.Base(path), ".yaml"),
			Template: string(data),
			Want:     strings.TrimSpace(want),
		})
	}
	return files
}
