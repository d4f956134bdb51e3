package clusters

import (
	"bytes"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// A bounded body reads up to its limit; one byte more is an error, and the
// underlying reader's own end or error passes through at the limit.
func TestBoundedBody(t *testing.T) {
	for _, tc := range []struct {
		body string
		max  int64
		want error
	}{
		{"12345", 5, nil},
		{"123456", 5, ErrResponseTooLarge},
		{"", 0, nil},
		{"1", 0, ErrResponseTooLarge},
	} {
		b := &boundedBody{ReadCloser: io.NopCloser(strings.NewReader(tc.body)), left: tc.max}
		got, err := io.ReadAll(b)
		if !errors.Is(err, tc.want) || (tc.want == nil && string(got) != tc.body) {
			t.Errorf("%q with a limit of %d: %q, %v; want %v", tc.body, tc.max, got, err, tc.want)
		}
	}
	broken := errors.New("connection reset")
	b := &boundedBody{ReadCloser: io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{broken})), left: 3}
	if _, err := io.ReadAll(b); !errors.Is(err, broken) {
		t.Fatalf("an error right at the limit became %v", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// The pool's health and write clients read answers bounded like the
// probe's; its watch client, whose lists can be long, is not bounded.
func TestPoolClientsBoundTheirAnswers(t *testing.T) {
	huge := bytes.Repeat([]byte("v"), maxResponseBytes+1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"gitVersion":"`))
		_, _ = w.Write(huge)
		_, _ = w.Write([]byte(`"}`))
	}))
	t.Cleanup(srv.Close)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	p := NewPool(PoolOptions{Client: ClientOptions{Egress: egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}})
	t.Cleanup(p.Close)
	c, err := p.newCluster(Target{EnvironmentID: "hostile", Connection: kubeconfig.Connection{Server: srv.URL, CAData: cert, Token: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().RESTClient().Get().AbsPath("/version").DoRaw(t.Context()); !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("writes client read an answer over %d bytes: %v", maxResponseBytes, err)
	}
	resp, err := c.checks.Get(srv.URL + "/version")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	if !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("checks client read an answer over %d bytes: %v", maxResponseBytes, err)
	}
	if v, err := c.caches.client.core.RESTClient().Get().AbsPath("/version").DoRaw(t.Context()); err != nil || len(v) != len(huge)+len(`{"gitVersion":""}`) {
		t.Errorf("watch client: %v (want the whole answer)", err)
	}
}

// A write client that cannot be built (settings the cluster's shared
// client accepted, so only in theory) fails every write with the reason
// rather than leaving the caller without a client.
func TestAWriteClientThatCannotBeBuiltFailsItsWrites(t *testing.T) {
	core, snapshots, _ := newWriteClients(Target{EnvironmentID: "broken", Connection: kubeconfig.Connection{Server: "https://127.0.0.1:1", CAData: []byte("not a certificate")}}, ClientOptions{})
	_, err := core.PersistentVolumeClaims("dcm").Get(t.Context(), "v", metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "build cluster client") {
		t.Fatalf("write through a client that could not be built: %v; want the reason", err)
	}
	_, err = snapshots.VolumeSnapshots("dcm").Get(t.Context(), "s", metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "build cluster client") {
		t.Fatalf("snapshot write through a client that could not be built: %v; want the reason", err)
	}
}
