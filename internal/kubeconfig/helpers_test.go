package kubeconfig_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

// The corpus lives in kubeconfigtest so the API tests share it; these short
// adapters keep the parser's tests readable.
type fixture struct{ caDER, ca, cert, key, otherKey []byte }

func pki() fixture {
	p := kubeconfigtest.Fixtures()
	return fixture{caDER: p.CADER, ca: p.CA, cert: p.Cert, key: p.Key, otherKey: p.OtherKey}
}

func pemBlock(typ string, der []byte) []byte { return kubeconfigtest.PEMBlock(typ, der) }

func b64(data []byte) string { return kubeconfigtest.B64(data) }

type env struct{ dir, addr, token string }

func newEnv(t testing.TB) env {
	e := kubeconfigtest.NewEnv(t)
	return env{dir: e.Dir, addr: e.Addr, token: e.Token}
}

func (e env) public() kubeconfigtest.Env {
	return kubeconfigtest.Env{Dir: e.dir, Addr: e.addr, Token: e.token}
}

func (e env) expand(template string) []byte { return e.public().Expand(template) }

func (e env) secrets() []string { return e.public().Secrets() }

type testFile struct{ name, template, want string }

func readTestFiles(t testing.TB, set string) []testFile {
	t.Helper()
	var files []testFile
	for _, f := range kubeconfigtest.Files(t, set) {
		files = append(files, testFile{name: f.Name, template: f.Template, want: f.Want})
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
