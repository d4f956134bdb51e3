package storagesp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/storagesp"
)

var cluster *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunWithLocalClusters(m, 1, func(c []*harness.Cluster) { cluster = c[0] }))
}

// answer is one HTTP answer of the stand-in.
type answer struct {
	code int
	body map[string]any
}

func call(t *testing.T, method, url, contentType string, body any) answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return answer{resp.StatusCode, out}
}

func spec(name, capacity string, edit func(spec, meta, k8s map[string]any)) map[string]any {
	meta, k8s := map[string]any{"name": name}, map[string]any{}
	s := map[string]any{"service_type": "storage", "capacity": capacity, "metadata": meta, "provider_hints": map[string]any{"kubernetes": k8s}}
	if edit != nil {
		edit(s, meta, k8s)
	}
	return map[string]any{"spec": s}
}

// The stand-in refuses what DCM's storage SP refuses, with its status codes
// and problem types and titles (the middleware's "Bad Request", the
// handler's "Invalid argument"), accepts what it accepts — a capacity in
// bytes, dcm.project/ labels other than the reserved ones — answers as it
// answers, has no update, and publishes its claims' status as it does.
func TestTheStandInBehavesAsTheStorageSP(t *testing.T) {
	nats := natstest.Start(t)
	stream := nats.DCMStream()
	ns := cluster.Spec.Environment.Namespace
	p := storagesp.Start(t, storagesp.Options{Name: "sp-under-test", DCMURL: "http://127.0.0.1:1/api/v1alpha1", NATSURL: nats.URL,
		Client: cluster.AdminClient(), Namespace: ns})
	url := p.Endpoint

	for _, tc := range []struct {
		name        string
		query       string
		contentType string
		body        map[string]any
		code        int
		typ, title  string
		detail      string
	}{
		{"ReadWriteOncePod", "", "", spec("rwop", "1Gi", func(_, _, k map[string]any) { k["access_mode"] = "ReadWriteOncePod" }),
			400, "INVALID_ARGUMENT", "Bad Request", "allowed values"},
		{"a bad volume mode", "", "", spec("raw", "1Gi", func(_, _, k map[string]any) { k["volume_mode"] = "Raw" }),
			400, "INVALID_ARGUMENT", "Bad Request", `["Filesystem","Block"]`},
		{"a class missing from the cluster", "", "", spec("nope", "1Gi", func(_, _, k map[string]any) { k["storage_class"] = "no-such-class" }),
			422, "FAILED_PRECONDITION", "Failed precondition", `StorageClass "no-such-class" does not exist`},
		{"a user-set reserved label", "", "", spec("reserved", "1Gi", func(_, m, _ map[string]any) {
			m["labels"] = map[string]any{"dcm.project/dcm-instance-id": "x"}
		}), 400, "INVALID_ARGUMENT", "Invalid argument", "is reserved by DCM"},
		{"id health", "?id=health", "", spec("health", "1Gi", nil), 400, "INVALID_ARGUMENT", "Invalid argument", `volume ID "health" is reserved`},
		{"name health", "", "", spec("health", "1Gi", nil), 400, "INVALID_ARGUMENT", "Invalid argument", `volume ID "health" is reserved`},
		{"an id with a dot", "?id=a.b", "", spec("a-b", "1Gi", nil), 400, "INVALID_ARGUMENT", "Bad Request", `parameter "id" in query`},
		{"a name with a dot", "", "", spec("a.b", "1Gi", nil), 400, "INVALID_ARGUMENT", "Bad Request", "regular expression"},
		{"an id that is not the name", "?id=other", "", spec("mine", "1Gi", nil), 400, "INVALID_ARGUMENT", "Invalid argument", "must match metadata.name"},
		{"an unknown kubernetes hint", "", "", spec("hint", "1Gi", func(_, _, k map[string]any) { k["namespace"] = "x" }),
			400, "INVALID_ARGUMENT", "Bad Request", `property "namespace" is unsupported`},
		{"a capacity in another case", "", "", spec("case", "10gi", nil), 400, "INVALID_ARGUMENT", "Bad Request", "regular expression"},
		{"1K: the pattern's, not a quantity", "", "", spec("kilo", "1K", nil), 400, "INVALID_ARGUMENT", "Invalid argument", "invalid capacity"},
		{"no spec", "", "", map[string]any{"metadata": map[string]any{}}, 400, "INVALID_ARGUMENT", "Bad Request", `property "spec" is missing`},
		{"not JSON", "", "text/plain", spec("text", "1Gi", nil), 400, "INVALID_ARGUMENT", "Bad Request", "Content-Type"},
		{"a read-only field", "", "", map[string]any{"spec": spec("ro", "1Gi", nil)["spec"], "status": "RUNNING"},
			400, "INVALID_ARGUMENT", "Bad Request", "doesn't match schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			a := call(t, http.MethodPost, url+tc.query, ct, tc.body)
			if a.code != tc.code || a.body["type"] != tc.typ || a.body["title"] != tc.title || !strings.Contains(a.body["detail"].(string), tc.detail) {
				t.Fatalf("HTTP %d %v; want %d %s %q saying %q", a.code, a.body, tc.code, tc.typ, tc.title, tc.detail)
			}
		})
	}

	// Accepted: a capacity in bytes, a dcm.project/ label that is not
	// reserved; the answer is rebuilt from the claim.
	id := uuid.NewString()
	a := call(t, http.MethodPost, url+"?id="+id, "application/json", spec(id, "1073741824", func(_, m, k map[string]any) {
		m["labels"] = map[string]any{"dcm.project/cost-center": "r-and-d"}
		k["storage_class"] = "standard"
	}))
	if a.code != http.StatusCreated {
		t.Fatalf("create: HTTP %d %v", a.code, a.body)
	}
	for _, k := range []string{"create_time", "update_time", "id", "path", "spec", "status"} {
		if _, ok := a.body[k]; !ok {
			t.Errorf("the create answer lacks %s: %v", k, a.body)
		}
	}
	s := a.body["spec"].(map[string]any)
	meta, k8s := s["metadata"].(map[string]any), s["provider_hints"].(map[string]any)["kubernetes"].(map[string]any)
	if a.body["path"] != "volumes/"+id || a.body["status"] != "PROVISIONING" || s["capacity"] != "1073741824" ||
		meta["namespace"] != ns || meta["labels"].(map[string]any)["dcm.project/cost-center"] != "r-and-d" ||
		k8s["access_mode"] != "ReadWriteOnce" || k8s["storage_class"] != "standard" || meta["display_name"] != nil {
		t.Fatalf("create answer %v", a.body)
	}
	pvc, err := cluster.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), id, metav1.GetOptions{})
	if err != nil || pvc.Labels["dcm.project/cost-center"] != "r-and-d" || pvc.Labels["dcm.project/dcm-instance-id"] != id {
		t.Fatalf("the claim: %v (%v)", pvc, err)
	}
	// The provider writes no annotation; the PV controller may already have
	// added its own, so what the provider wrote is read from the managed
	// fields rather than from the annotations themselves.
	for _, f := range pvc.ManagedFields {
		if f.Manager != "kube-controller-manager" && f.FieldsV1 != nil && strings.Contains(f.FieldsV1.GetRawString(), `"f:annotations"`) {
			t.Fatalf("%s annotated the claim: %s", f.Manager, f.FieldsV1.GetRawString())
		}
	}
	if a := call(t, http.MethodPost, url+"?id="+id, "application/json", spec(id, "1Gi", nil)); a.code != http.StatusConflict || a.body["type"] != "ALREADY_EXISTS" {
		t.Fatalf("a second create: HTTP %d %v", a.code, a.body)
	}
	if a := call(t, http.MethodPatch, url+"/"+id, "application/json", map[string]any{"capacity": "2Gi"}); a.code != http.StatusMethodNotAllowed {
		t.Fatalf("PATCH: HTTP %d", a.code)
	}
	poll.Until(t, time.Minute, "the claim bound", func() bool {
		return call(t, http.MethodGet, url+"/"+id, "", nil).body["status"] == "RUNNING"
	})
	// Its status events: core NATS on dcm.storage, its source, no extension.
	poll.Value(t, 30*time.Second, func() ([]string, bool) {
		got := natstest.For(stream.Events(), id)
		return got, len(got) > 0 && got[len(got)-1] == "RUNNING"
	})
	if a := call(t, http.MethodGet, url, "", nil); a.code != http.StatusOK || len(a.body["volumes"].([]any)) == 0 {
		t.Fatalf("list: HTTP %d %v", a.code, a.body)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if a := call(t, m, url+"/unknown", "", nil); a.code != http.StatusNotFound || a.body["type"] != "NOT_FOUND" {
			t.Fatalf("%s an unknown volume: HTTP %d %v", m, a.code, a.body)
		}
	}
	if a := call(t, http.MethodDelete, url+"/"+id, "", nil); a.code != http.StatusNoContent {
		t.Fatalf("delete: HTTP %d %v", a.code, a.body)
	}
	poll.Until(t, time.Minute, "the claim gone", func() bool {
		_, err := cluster.AdminClient().CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), id, metav1.GetOptions{})
		return err != nil
	})
	poll.Value(t, 30*time.Second, func() ([]string, bool) {
		got := natstest.For(stream.Events(), id)
		return got, got[len(got)-1] == "DELETED"
	})
	for _, e := range stream.Events() {
		if e.Data.ID == id && (e.Source != "dcm/providers/sp-under-test" || e.Type != "dcm.status.storage" || e.Subject != "dcm.storage" ||
			e.EnvironmentID != "" || e.MsgID != "") {
			t.Fatalf("event %+v is not the provider's", e)
		}
	}
}
