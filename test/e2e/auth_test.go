package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/test/contract"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/harness"
)

// call is one request of the authorization walk.
type call struct {
	method, path string
	body         any
	contentType  string
	// want is the status the right role gets.
	want int
}

// send makes c with token ("" for none) and returns the status, headers and
// decoded body.
func (c call) send(t *testing.T, base, token string) (int, http.Header, map[string]any) {
	t.Helper()
	var r io.Reader
	if c.body != nil {
		raw, err := json.Marshal(c.body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), c.method, base+c.path, r)
	if err != nil {
		t.Fatal(err)
	}
	if c.body != nil {
		ct := c.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.Header, out
}

// TestEveryOperationEnforcesItsRoles walks every operation of the OpenAPI
// document. A protected one answers 401 without a token and with a bad one,
// 403 to a principal lacking its roles, 404 (403 for a create) to one whose
// environment scope excludes the environment, and succeeds for each role it
// admits; an open one answers without a token. An operation this walk has no
// request for fails it: a new endpoint cannot ship without a rule.
func TestEveryOperationEnforcesItsRoles(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	admin := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	envID := east.Spec.Environment.ID
	admin.register(east)
	admin.waitLive(envID)
	kubeconfig, err := east.GatewayKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[auth.Role]string{auth.RoleAdmin: g.Tokens.Admin, auth.RoleDCM: g.Tokens.DCM, auth.RoleViewer: g.Tokens.Viewer}
	outOfScope := g.AddToken(t, "elsewhere", auth.Roles, []string{"elsewhere"})

	registrations := 0
	newEnvironment := func() string {
		registrations++
		id := fmt.Sprintf("walk-%d", registrations)
		// Beside east, on its namespace: shared on purpose.
		code, body := admin.do(http.MethodPost, "/api/v1alpha1/environments?id="+id, map[string]any{"kubeconfig": string(kubeconfig), "share_namespaces": true})
		admin.want(http.StatusCreated, code, body)
		return id
	}
	newVolume := func() string {
		id := uuid.NewString()
		code, body := admin.do(http.MethodPost, volumesPath(envID)+"?id="+id, map[string]any{"spec": storageSpec("walk", "1Gi", nil)})
		admin.want(http.StatusCreated, code, body)
		admin.waitStatus(envID, id, "RUNNING", time.Minute)
		return id
	}
	// A volume of the CSI plugin's class, which can be snapshotted and
	// retiered, and one of its snapshots.
	plugged := admin.runningVolume(envID, "snapshots")
	snapshots := snapshotsPath(envID, plugged)
	newSnapshot := func() string {
		id := uuid.NewString()
		code, body := admin.do(http.MethodPost, snapshots+"?id="+id, map[string]any{"snapshot_class": "snapshots"})
		admin.want(http.StatusCreated, code, body)
		return id
	}
	envPath := "/api/v1alpha1/environments/" + envID
	// requests builds, for an operation, the request a principal of the
	// admitted roles succeeds with; it may set up what that needs.
	requests := map[string]func() call{
		"getHealthz": func() call { return call{method: "GET", path: "/healthz", want: 200} },
		"getReadyz":  func() call { return call{method: "GET", path: "/readyz", want: 200} },
		"getOpenAPI": func() call { return call{method: "GET", path: "/api/v1alpha1/openapi.yaml", want: 200} },
		"getVolumesHealth": func() call {
			return call{method: "GET", path: volumesPath(envID) + "/health", want: 200}
		},
		"createEnvironment": func() call {
			registrations++
			return call{method: "POST", path: fmt.Sprintf("/api/v1alpha1/environments?id=walk-%d", registrations),
				body: map[string]any{"kubeconfig": string(kubeconfig), "share_namespaces": true}, want: 201}
		},
		"listEnvironments": func() call { return call{method: "GET", path: "/api/v1alpha1/environments", want: 200} },
		"getEnvironment":   func() call { return call{method: "GET", path: envPath, want: 200} },
		"updateEnvironment": func() call {
			return call{method: "PATCH", path: envPath, body: map[string]any{"description": "walked"},
				contentType: "application/merge-patch+json", want: 200}
		},
		"deleteEnvironment": func() call {
			return call{method: "DELETE", path: "/api/v1alpha1/environments/" + newEnvironment(), want: 204}
		},
		"verifyEnvironment": func() call { return call{method: "POST", path: envPath + ":verify", want: 200} },
		// The walk's gateway does not register with DCM: the admitted role
		// gets the precondition's 422, every other caller what the guard says.
		"takeOverDCMProvider": func() call { return call{method: "POST", path: envPath + ":takeOverDCMProvider", want: 422} },
		"adoptVolumes": func() call {
			return call{method: "POST", path: envPath + ":adopt", body: map[string]any{"validate_only": true}, want: 200}
		},
		"listStorageClasses": func() call { return call{method: "GET", path: "/api/v1alpha1/storage-classes", want: 200} },
		"listPlacements":     func() call { return call{method: "GET", path: "/api/v1alpha1/placements?capacity=1Gi", want: 200} },
		"listFleetVolumes":   func() call { return call{method: "GET", path: "/api/v1alpha1/volumes", want: 200} },
		"listEnvironmentStorageClasses": func() call {
			return call{method: "GET", path: envPath + "/storage-classes", want: 200}
		},
		"getEnvironmentStorageClass": func() call {
			return call{method: "GET", path: envPath + "/storage-classes/standard", want: 200}
		},
		"createVolume": func() call {
			return call{method: "POST", path: volumesPath(envID) + "?id=" + uuid.NewString(),
				body: map[string]any{"spec": storageSpec("walk", "1Gi", nil)}, want: 201}
		},
		"listVolumes": func() call { return call{method: "GET", path: volumesPath(envID), want: 200} },
		"getVolume":   func() call { return call{method: "GET", path: volumesPath(envID) + "/" + newVolume(), want: 200} },
		"updateVolume": func() call {
			return call{method: "PATCH", path: volumesPath(envID) + "/" + newVolume(), body: map[string]any{"capacity": "2Gi"}, want: 200}
		},
		"deleteVolume": func() call {
			return call{method: "DELETE", path: volumesPath(envID) + "/" + newVolume(), want: 204}
		},
		"listAuditEvents": func() call { return call{method: "GET", path: "/api/v1alpha1/audit-events", want: 200} },
		"retierVolume": func() call {
			return call{method: "POST", path: volumesPath(envID) + "/" + plugged + ":retier", body: map[string]any{"tier": "gold"}, want: 200}
		},
		"createSnapshot": func() call {
			return call{method: "POST", path: snapshots + "?id=" + uuid.NewString(), body: map[string]any{"snapshot_class": "snapshots"}, want: 201}
		},
		"listSnapshots":  func() call { return call{method: "GET", path: snapshots, want: 200} },
		"getSnapshot":    func() call { return call{method: "GET", path: snapshots + "/" + newSnapshot(), want: 200} },
		"deleteSnapshot": func() call { return call{method: "DELETE", path: snapshots + "/" + newSnapshot(), want: 204} },
	}

	spec, _ := contract.Load(t)
	walked := 0
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			walked++
			t.Run(op.OperationID, func(t *testing.T) {
				build, ok := requests[op.OperationID]
				if !ok {
					t.Fatalf("%s %s (%s) has no authorization case here: add one", method, path, op.OperationID)
				}
				if op.Security == nil {
					t.Fatalf("%s declares no security requirement", op.OperationID)
				}
				var admitted []auth.Role
				for _, req := range *op.Security {
					for name := range req {
						admitted = append(admitted, auth.Role(name))
					}
				}
				if len(admitted) == 0 {
					c := build()
					if code, _, body := c.send(t, g.URL, ""); code != c.want {
						t.Fatalf("open operation without a token: %d %v, want %d", code, body, c.want)
					}
					return
				}
				// Refusals are checked on one request, which never runs.
				c := build()
				for name, token := range map[string]string{"no token": "", "a bad token": "sgw_not-a-token", "a JWT-looking token": "e30.e30.e30"} {
					code, hdr, body := c.send(t, g.URL, token)
					if code != http.StatusUnauthorized || body["type"] != "UNAUTHENTICATED" || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("%s: %d %v (WWW-Authenticate %q), want 401", name, code, body, hdr.Get("WWW-Authenticate"))
					}
				}
				for _, role := range auth.Roles {
					if slices.Contains(admitted, role) {
						continue
					}
					if code, _, body := c.send(t, g.URL, tokens[role]); code != http.StatusForbidden || body["type"] != "PERMISSION_DENIED" {
						t.Fatalf("role %s: %d %v, want 403", role, code, body)
					}
				}
				if strings.Contains(path, "{environment_id}") || op.OperationID == "createEnvironment" {
					want := http.StatusNotFound
					if op.OperationID == "createEnvironment" {
						want = http.StatusForbidden
					}
					if code, _, body := c.send(t, g.URL, outOfScope); code != want {
						t.Fatalf("a principal scoped to other environments: %d %v, want %d", code, body, want)
					}
				}
				for _, role := range admitted {
					c := build()
					if code, _, body := c.send(t, g.URL, tokens[role]); code != c.want {
						t.Fatalf("role %s: %d %v, want %d", role, code, body, c.want)
					}
				}
			})
		}
	}
	if walked != len(requests) {
		t.Errorf("walked %d operations but have requests for %d: remove the requests of operations that are gone", walked, len(requests))
	}

	// Refused mutations by known principals are audited with their answer.
	code, page := admin.do(http.MethodGet, "/api/v1alpha1/audit-events?subject=test-viewer&action=deleteEnvironment", nil)
	admin.want(http.StatusOK, code, page)
	events, _ := page["audit_events"].([]any)
	if len(events) != 1 || fmt.Sprint(events[0].(map[string]any)["status"]) != "403" {
		t.Fatalf("the viewer's refused delete: %v", page)
	}
}

// TestScopedPrincipalsSeeOnlyTheirEnvironments: a principal limited to east
// finds west nowhere — not in lists, fleet views, filters, volumes or the
// audit trail — and west's own paths answer 404 as if it did not exist.
func TestScopedPrincipalsSeeOnlyTheirEnvironments(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	admin := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east, west := clusters[0].Spec.Environment.ID, clusters[1].Spec.Environment.ID
	for _, c := range clusters {
		admin.register(c)
	}
	admin.waitLive(east, west)
	for _, env := range []string{east, west} {
		code, body := admin.do(http.MethodPost, volumesPath(env)+"?id="+uuid.NewString(), map[string]any{"spec": storageSpec("scoped", "1Gi", nil)})
		admin.want(http.StatusCreated, code, body)
	}
	scoped := client{t: t, base: g.URL, token: g.AddToken(t, "east-ops", []auth.Role{auth.RoleAdmin}, []string{east})}

	ids := func(path, list, key string) []string {
		t.Helper()
		code, body := scoped.do(http.MethodGet, path, nil)
		scoped.want(http.StatusOK, code, body)
		var out []string
		items, _ := body[list].([]any)
		for _, item := range items {
			m := item.(map[string]any)
			if key == "environments" { // one entry per class; collect its environments
				for _, d := range m["environments"].([]any) {
					out = append(out, d.(map[string]any)["environment_id"].(string))
				}
				continue
			}
			out = append(out, fmt.Sprint(m[key]))
		}
		return out
	}
	onlyEast := func(what string, got []string) {
		t.Helper()
		if len(got) == 0 || slices.ContainsFunc(got, func(id string) bool { return id != east }) {
			t.Errorf("%s: %v, want east only", what, got)
		}
	}
	onlyEast("environments", ids("/api/v1alpha1/environments", "environments", "id"))
	onlyEast("storage classes", ids("/api/v1alpha1/storage-classes", "storage_classes", "environments"))
	onlyEast("fleet volumes", ids("/api/v1alpha1/volumes", "volumes", "environment_id"))
	onlyEast("audit events", ids("/api/v1alpha1/audit-events", "audit_events", "environment_id"))
	// The audit trail outlives environments, so its filter is not checked
	// for existence: out of scope it is simply empty.
	code, body := scoped.do(http.MethodGet, "/api/v1alpha1/audit-events?environment="+west, nil)
	if items, _ := body["audit_events"].([]any); code != http.StatusOK || len(items) != 0 {
		t.Errorf("the audit trail of the out-of-scope environment: %d %v", code, body)
	}
	// West's paths, and filters naming it, answer exactly as for an
	// environment that does not exist.
	for _, tc := range []struct{ path, unknownPath string }{
		{"/api/v1alpha1/environments/" + west, "/api/v1alpha1/environments/nowhere"},
		{"/api/v1alpha1/environments/" + west + "/storage-classes", "/api/v1alpha1/environments/nowhere/storage-classes"},
		{volumesPath(west), volumesPath("nowhere")},
		{"/api/v1alpha1/storage-classes?environment=" + west, "/api/v1alpha1/storage-classes?environment=nowhere"},
		{"/api/v1alpha1/volumes?environment=" + east + "&environment=" + west, "/api/v1alpha1/volumes?environment=" + east + "&environment=nowhere"},
	} {
		_, unknown := admin.do(http.MethodGet, tc.unknownPath, nil)
		code, body := scoped.do(http.MethodGet, tc.path, nil)
		if code != http.StatusNotFound || strings.ReplaceAll(fmt.Sprint(body), west, "nowhere") != fmt.Sprint(unknown) {
			t.Errorf("%s: %d %v, want the 404 of an unknown environment (%v)", tc.path, code, body, unknown)
		}
	}
}

// TestConcurrentVerifiesShareOneProbe: a hundred simultaneous :verify calls
// of one environment send one probe's worth of permission reviews to the
// cluster (counted by the API server itself), not a hundred: a rules review
// per namespace, and no access review (RBAC lists every rule).
func TestConcurrentVerifiesShareOneProbe(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	admin := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	admin.register(east)
	rulesBefore, accessBefore := reviews(t, east, "selfsubjectrulesreviews"), reviews(t, east, "selfsubjectaccessreviews")
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			code, body, err := admin.try(http.MethodPost, "/api/v1alpha1/environments/"+east.Name()+":verify", nil)
			if err != nil || code != http.StatusOK {
				t.Errorf("verify: %d %v %v", code, body, err)
			}
		})
	}
	wg.Wait()
	perProbe := len(east.Spec.Environment.Namespaces())
	got := reviews(t, east, "selfsubjectrulesreviews") - rulesBefore
	// Calls that arrive after a probe finished start the next one; a
	// hundred calls at once fit in very few.
	if got < perProbe || got > 3*perProbe {
		t.Fatalf("100 concurrent verifies sent %d rules reviews; one probe sends %d", got, perProbe)
	}
	if access := reviews(t, east, "selfsubjectaccessreviews") - accessBefore; access != 0 {
		t.Fatalf("100 concurrent verifies sent %d access reviews; the rules reviews are complete, so none is needed", access)
	}
	t.Logf("100 concurrent verifies: %d rules reviews (%d per probe)", got, perProbe)
}

// reviews is how many requests for resource (a kind of review) the
// cluster's API server has answered, from its own metrics.
func reviews(t *testing.T, c *harness.Cluster, resource string) int {
	t.Helper()
	raw, err := c.AdminClient().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for line := range strings.SplitSeq(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="`+resource+`"`) {
			var n float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n); err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			total += int(n)
		}
	}
	return total
}

// TestAuditNamesWhatItCreated: a volume created under an Idempotency-Key
// (no id in the request) is named in its audit record.
func TestAuditNamesWhatItCreated(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	dcm := client{t: t, base: g.URL, token: g.Tokens.DCM}
	admin := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0].Spec.Environment.ID
	admin.register(clusters[0])
	code, v := dcm.do(http.MethodPost, volumesPath(east), storageSpec("agent", "1Gi", nil), "Idempotency-Key", uuid.NewString())
	dcm.want(http.StatusCreated, code, v)
	code, page := admin.do(http.MethodGet, "/api/v1alpha1/audit-events?action=createVolume", nil)
	admin.want(http.StatusOK, code, page)
	events, _ := page["audit_events"].([]any)
	if len(events) != 1 {
		t.Fatalf("audit events: %v", page)
	}
	e := events[0].(map[string]any)
	if e["volume_id"] != v["id"] || e["subject"] != "test-dcm" || fmt.Sprint(e["status"]) != "201" || e["environment_id"] != east {
		t.Fatalf("audit event %v for volume %v", e, v["id"])
	}
}
