package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig/kubeconfigtest"
)

// Every malicious kubeconfig of the parser's corpus, sent over HTTP, is
// refused with 400 naming the kubeconfig field, before any connection, file
// access or command: the bait files stay untouched, the plugin never runs and
// the listener the configs point at sees no connection.
func TestMaliciousKubeconfigsAreRefusedWithoutSideEffects(t *testing.T) {
	h, reg := registryServer(t)
	bait := kubeconfigtest.NewBait(t)
	env := bait.Env

	files := kubeconfigtest.Files(t, "malicious")
	if len(files) < 68 {
		t.Fatalf("only %d malicious kubeconfigs; the corpus holds 68", len(files))
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			body := map[string]any{"kubeconfig": string(env.Expand(f.Template)), "namespace": "dcm-volumes"}
			rec := call(t, h, http.MethodPost, "/api/v1alpha1/environments?id=hostile", "application/json", body)
			problem(t, rec, http.StatusBadRequest, api.INVALIDARGUMENT, "kubeconfig"+dotted(f.Want))
			for _, s := range env.Secrets() {
				if strings.Contains(rec.Body.String(), s) {
					t.Fatalf("problem leaks %q: %s", s, rec.Body)
				}
			}
		})
	}
	bait.AssertUntouched(t)
	for _, s := range env.Secrets() {
		reg.AssertNoSecret(t, s)
	}
	if rows := reg.DumpTable(t, "environments"); rows != "" {
		t.Fatal("a malicious registration was stored")
	}
}

// dotted is how a kubeconfig field path appears under the API's
// "kubeconfig" field.
func dotted(field string) string {
	if field == "" {
		return ""
	}
	return "." + field
}
