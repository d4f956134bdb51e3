package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// client speaks HTTP to a gateway.
type client struct {
	t    testing.TB
	base string
	// token is sent as a bearer token when set.
	token string
	// http sends the requests (http.DefaultClient when nil).
	http *http.Client
}

// do sends a request and returns the status and the decoded JSON body; a
// request that cannot be sent fails the test.
func (c client) do(method, path string, body any, headers ...string) (int, map[string]any) {
	c.t.Helper()
	code, out, err := c.try(method, path, body, headers...)
	if err != nil {
		c.t.Fatal(err)
	}
	return code, out
}

// try is do for goroutines other than the test's: it returns the error.
func (c client) try(method, path string, body any, headers ...string) (int, map[string]any, error) {
	resp, err := c.send(method, path, body, headers...)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, nil
}

// send sends a request (body as JSON, the token, header name-value pairs)
// and returns the answer unread: the caller closes its body.
func (c client) send(method, path string, body any, headers ...string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	hc := c.http
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// get sends GET path and returns the answer unread (the caller closes
// its body); a request that cannot be sent fails the test.
func (c client) get(path string) *http.Response {
	c.t.Helper()
	resp, err := c.send(http.MethodGet, path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// want asserts a status and, for problems, that the detail or field
// mentions each of mention.
func (c client) want(status int, got int, body map[string]any, mention ...string) {
	c.t.Helper()
	if got != status {
		c.t.Fatalf("status %d, want %d: %v", got, status, body)
	}
	text := fmt.Sprint(body["detail"], " ", body["field"])
	for _, m := range mention {
		if !strings.Contains(text, m) {
			c.t.Fatalf("problem %v does not mention %q", body, m)
		}
	}
}

// register adds a harness cluster as an environment and waits until its
// provider health is healthy.
func (c client) register(cluster *harness.Cluster) {
	c.t.Helper()
	kc, err := cluster.GatewayKubeconfig()
	if err != nil {
		c.t.Fatal(err)
	}
	c.registerWith(cluster, kc)
}

// registerWith is register with the given kubeconfig.
func (c client) registerWith(cluster *harness.Cluster, kc []byte) {
	c.t.Helper()
	env := cluster.Spec.Environment
	code, body := c.do(http.MethodPost, "/api/v1alpha1/environments?id="+env.ID, map[string]any{
		"kubeconfig": string(kc), "allowed_namespaces": env.AllowedNamespaces, "region": env.Region,
	})
	c.want(http.StatusCreated, code, body)
	c.eventually(30*time.Second, "healthy provider "+env.ID, func() bool {
		_, h := c.do(http.MethodGet, volumesPath(env.ID)+"/health", nil)
		return h["status"] == "healthy" && strings.HasPrefix(fmt.Sprint(h["message"]), "READY: ")
	})
}

func (c client) eventually(within time.Duration, what string, ok func() bool) {
	c.t.Helper()
	poll.Until(c.t, within, what, ok)
}

// waitStatus polls a volume until it reports status (and, if given, capacity).
func (c client) waitStatus(envID, id, status string, within time.Duration, capacity ...string) map[string]any {
	c.t.Helper()
	var last map[string]any
	c.eventually(within, fmt.Sprintf("volume %s %s %v", id, status, capacity), func() bool {
		_, last = c.do(http.MethodGet, volumesPath(envID)+"/"+id, nil)
		return last["status"] == status && (len(capacity) == 0 || field(last, "spec", "capacity") == capacity[0])
	})
	return last
}

func volumesPath(envID string) string { return "/api/v1alpha1/environments/" + envID + "/volumes" }

func storageSpec(name, capacity string, hints map[string]any) map[string]any {
	spec := map[string]any{"service_type": "storage", "capacity": capacity, "metadata": map[string]any{"name": name, "labels": map[string]string{"team": "e2e"}}}
	if hints != nil {
		spec["provider_hints"] = map[string]any{"kubernetes": hints, "other-provider": map[string]any{"ignored": true}}
	}
	return spec
}

// claims counts the PVCs named name in a cluster namespace, as its admin sees them.
func claims(t *testing.T, cluster *harness.Cluster, namespace, name string) int {
	t.Helper()
	list, err := cluster.AdminClient().CoreV1().PersistentVolumeClaims(namespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pvc := range list.Items {
		if pvc.Name == name {
			n++
		}
	}
	return n
}

func field(body map[string]any, path ...string) any {
	var cur any = body
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// TestVolumeLifecycleInTwoEnvironments is DCM's storage contract end to end
// against two real clusters with different storage: create, read, list,
// expand and delete in each, through both request shapes.
func TestVolumeLifecycleInTwoEnvironments(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	for _, cluster := range clusters {
		c.register(cluster)
	}
	for _, tc := range []struct {
		cluster           *harness.Cluster
		expandable, fixed string
		wantDefaultClass  string
	}{
		{clusters[0], "standard", "archive", "standard"},
		{clusters[1], "gp3", "standard", "gp3"},
	} {
		env := tc.cluster.Spec.Environment
		t.Run(env.ID, func(t *testing.T) {
			c := client{t: t, base: g.URL, token: g.Tokens.Admin}
			path := volumesPath(env.ID)

			// Service-provider-manager shape: ?id + {"spec": ...}; default class.
			id := uuid.NewString()
			req := map[string]any{"spec": storageSpec("data", "1Gi", nil)}
			code, v := c.do(http.MethodPost, path+"?id="+id, req)
			c.want(http.StatusCreated, code, v)
			if created, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(v["create_time"])); time.Since(created) > time.Minute {
				t.Fatalf("create_time %v is not the creation time", v["create_time"])
			}
			if v["id"] != id || field(v, "spec", "metadata", "storage_class") != tc.wantDefaultClass || field(v, "spec", "metadata", "namespace") != env.Namespace {
				t.Fatalf("created volume: %v", v)
			}
			c.waitStatus(env.ID, id, "RUNNING", time.Minute)
			code, v = c.do(http.MethodPost, path+"?id="+id, req)
			c.want(http.StatusOK, code, v)
			conflicting := map[string]any{"spec": storageSpec("data", "2Gi", nil)}
			code, v = c.do(http.MethodPost, path+"?id="+id, conflicting)
			c.want(http.StatusConflict, code, v, "spec.capacity")
			if n := claims(t, tc.cluster, env.Namespace, id); n != 1 {
				t.Fatalf("%d claims after replays, want 1", n)
			}

			// Expansion: larger on an expandable class, refused otherwise.
			code, v = c.do(http.MethodPatch, path+"/"+id, map[string]any{"capacity": "512Mi"})
			c.want(http.StatusBadRequest, code, v, "larger")
			code, v = c.do(http.MethodPatch, path+"/"+id, map[string]any{"capacity": "3Gi"})
			c.want(http.StatusOK, code, v)
			if v["status"] != "PROVISIONING" {
				t.Fatalf("expansion answer: %v", v)
			}
			c.waitStatus(env.ID, id, "RUNNING", time.Minute, "3Gi")
			// As DCM's storage contract writes it: a capacity in bytes, and a
			// dcm.project/ label that is not one the gateway sets.
			fixed := uuid.NewString()
			fixedSpec := storageSpec("fixed", "1073741824", map[string]any{"storage_class": tc.fixed})
			fixedSpec["metadata"].(map[string]any)["labels"] = map[string]string{"dcm.project/cost-center": "r-and-d"}
			code, v = c.do(http.MethodPost, path+"?id="+fixed, map[string]any{"spec": fixedSpec})
			c.want(http.StatusCreated, code, v)
			if field(v, "spec", "capacity") != "1073741824" || field(v, "spec", "metadata", "labels", "dcm.project/cost-center") != "r-and-d" {
				t.Fatalf("a capacity in bytes and a dcm.project/ label: %v", v)
			}
			c.waitStatus(env.ID, fixed, "RUNNING", time.Minute)
			code, v = c.do(http.MethodPatch, path+"/"+fixed, map[string]any{"capacity": "2Gi"})
			c.want(http.StatusUnprocessableEntity, code, v, "does not allow volume expansion")

			// Environment-agent shape: bare spec + Idempotency-Key, redelivered.
			key := uuid.NewString()
			bare := storageSpec("agent", "1Gi", nil)
			code, first := c.do(http.MethodPost, path, bare, "Idempotency-Key", key)
			c.want(http.StatusCreated, code, first)
			for range 2 {
				code, again := c.do(http.MethodPost, path, bare, "Idempotency-Key", key)
				c.want(http.StatusOK, code, again)
				if again["id"] != first["id"] {
					t.Fatalf("redelivery created another volume: %v vs %v", again["id"], first["id"])
				}
			}
			code, v = c.do(http.MethodPost, path, storageSpec("agent", "5Gi", nil), "Idempotency-Key", key)
			c.want(http.StatusUnprocessableEntity, code, v, "Idempotency-Key")

			// List (paged) holds all three.
			seen := map[string]bool{}
			next := ""
			for {
				code, page := c.do(http.MethodGet, path+"?max_page_size=2&page_token="+next, nil)
				c.want(http.StatusOK, code, page)
				for _, item := range page["volumes"].([]any) {
					seen[item.(map[string]any)["id"].(string)] = true
				}
				tok, _ := page["next_page_token"].(string)
				if tok == "" {
					break
				}
				next = tok
			}
			if !seen[id] || !seen[fixed] || !seen[first["id"].(string)] || len(seen) != 3 {
				t.Fatalf("list saw %v", seen)
			}

			// Delete: 204, then gone; a second delete is 404.
			for _, vid := range []string{id, fixed, first["id"].(string)} {
				code, v = c.do(http.MethodDelete, path+"/"+vid, nil)
				c.want(http.StatusNoContent, code, v)
			}
			c.eventually(time.Minute, "deleted", func() bool {
				code, _ := c.do(http.MethodGet, path+"/"+id, nil)
				return code == http.StatusNotFound
			})
			code, v = c.do(http.MethodDelete, path+"/"+id, nil)
			c.want(http.StatusNotFound, code, v)
		})
	}
}

// TestCreateRefusals covers the 4xx answers of create.
func TestCreateRefusals(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	path := volumesPath(east.Spec.Environment.ID)
	tests := []struct {
		name    string
		path    string
		body    any
		headers []string
		status  int
		mention []string
	}{
		{"unknown class", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "1Gi", map[string]any{"storage_class": "gold"})}, nil, 422, []string{"gold"}},
		{"unsupported access mode", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "1Gi", map[string]any{"storage_class": "standard", "access_mode": "ReadWriteMany"})}, nil, 422, []string{"ReadWriteOnce, ReadWriteOncePod"}},
		{"namespace not allowed", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "1Gi", map[string]any{"namespace": "kube-system"})}, nil, 422, []string{"namespace"}},
		{"unknown environment", volumesPath("nowhere") + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "1Gi", nil)}, nil, 404, nil},
		{"no id and no key", path, storageSpec("x", "1Gi", nil), nil, 400, []string{"Idempotency-Key"}},
		{"capacity not as the contract writes it", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "10gi", nil)}, nil, 400, []string{"spec.capacity"}},
		{"capacity the contract writes but Kubernetes does not", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "1K", nil)}, nil, 400, []string{"spec.capacity"}},
		{"zero capacity", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "0Gi", nil)}, nil, 400, []string{"greater than zero"}},
		{"reserved label", path + "?id=" + uuid.NewString(), map[string]any{"spec": map[string]any{"service_type": "storage", "capacity": "1Gi", "metadata": map[string]any{"name": "x", "labels": map[string]string{"dcm.project/managed-by": "me"}}}}, nil, 400, []string{"reserved"}},
		{"unknown kubernetes hint", path + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("x", "1Gi", map[string]any{"storageclass": "typo"})}, nil, 400, nil},
		{"health is not an id", path + "?id=health", map[string]any{"spec": storageSpec("x", "1Gi", nil)}, nil, 400, []string{"health"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client{t: t, base: g.URL, token: g.Tokens.Admin}
			code, body := c.do(http.MethodPost, tt.path, tt.body, tt.headers...)
			c.want(tt.status, code, body, tt.mention...)
		})
	}

	// A PVC of that name that the gateway does not manage.
	id := uuid.NewString()
	foreign := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: east.Spec.Environment.Namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := east.AdminClient().CoreV1().PersistentVolumeClaims(foreign.Namespace).Create(t.Context(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, body := c.do(http.MethodPost, path+"?id="+id, map[string]any{"spec": storageSpec("x", "1Gi", nil)})
	c.want(http.StatusConflict, code, body, "does not manage")
	code, body = c.do(http.MethodGet, path+"/"+id, nil)
	c.want(http.StatusNotFound, code, body)

	// WaitForFirstConsumer: accepted, and says why it waits.
	wffc := uuid.NewString()
	code, body = c.do(http.MethodPost, path+"?id="+wffc, map[string]any{"spec": storageSpec("later", "1Gi", map[string]any{"storage_class": "standard-wffc"})})
	c.want(http.StatusCreated, code, body)
	got := c.waitStatus(east.Spec.Environment.ID, wffc, "PROVISIONING", 30*time.Second)
	c.eventually(30*time.Second, "waiting-for-first-consumer message", func() bool {
		_, got = c.do(http.MethodGet, path+"/"+wffc, nil)
		return got["status_message"] == "waiting for first consumer"
	})

	// A namespace quota on requests.storage: growth past it is 409.
	scratch := uuid.NewString()
	code, body = c.do(http.MethodPost, path+"?id="+scratch, map[string]any{"spec": storageSpec("big", "40Gi", map[string]any{"namespace": "dcm-scratch"})})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(east.Spec.Environment.ID, scratch, "RUNNING", time.Minute)
	code, body = c.do(http.MethodPatch, path+"/"+scratch, map[string]any{"capacity": "60Gi"})
	c.want(http.StatusConflict, code, body, "ResourceQuota")
}

// TestUnreachableEnvironment: writes answer 503 while reads still come from
// the cache, health turns unhealthy, and the other environment is unaffected.
func TestUnreachableEnvironment(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{HealthUnhealthyCode: http.StatusServiceUnavailable})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east, west := clusters[0], clusters[1]
	c.register(east)
	c.register(west)
	eastPath, westPath := volumesPath(east.Spec.Environment.ID), volumesPath(west.Spec.Environment.ID)
	id := uuid.NewString()
	code, body := c.do(http.MethodPost, eastPath+"?id="+id, map[string]any{"spec": storageSpec("kept", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(east.Spec.Environment.ID, id, "RUNNING", time.Minute)

	east.SetReachable(false)
	defer east.SetReachable(true)
	c.eventually(60*time.Second, "east unhealthy", func() bool {
		code, h := c.do(http.MethodGet, eastPath+"/health", nil)
		return code == http.StatusServiceUnavailable && h["status"] == "unhealthy"
	})
	code, body = c.do(http.MethodPost, eastPath+"?id="+uuid.NewString(), map[string]any{"spec": storageSpec("new", "1Gi", nil)})
	c.want(http.StatusServiceUnavailable, code, body)
	code, body = c.do(http.MethodDelete, eastPath+"/"+id, nil)
	c.want(http.StatusServiceUnavailable, code, body)
	code, body = c.do(http.MethodGet, eastPath+"/"+id, nil)
	c.want(http.StatusOK, code, body)
	code, body = c.do(http.MethodGet, eastPath, nil)
	c.want(http.StatusOK, code, body)

	other := uuid.NewString()
	code, body = c.do(http.MethodPost, westPath+"?id="+other, map[string]any{"spec": storageSpec("elsewhere", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	code, body = c.do(http.MethodDelete, westPath+"/"+other, nil)
	c.want(http.StatusNoContent, code, body)

	east.SetReachable(true)
	c.eventually(30*time.Second, "east healthy again", func() bool {
		code, _ := c.do(http.MethodGet, eastPath+"/health", nil)
		return code == http.StatusOK
	})
	code, body = c.do(http.MethodDelete, eastPath+"/"+id, nil)
	c.want(http.StatusNoContent, code, body)
}

// TestAFrozenAPIServerIsUnavailableWithinTheWriteDeadline: a write to an
// API server that accepts and never answers (stopped with SIGSTOP) is
// answered 503 (Retry-After) once SG_CLUSTER_WRITE_TIMEOUT has passed,
// not when the caller gives up; thawed, the same request converges.
func TestAFrozenAPIServerIsUnavailableWithinTheWriteDeadline(t *testing.T) {
	const deadline = 2 * time.Second
	g := gatewaytest.Start(t, gatewaytest.Options{Settings: map[string]string{"SG_CLUSTER_WRITE_TIMEOUT": deadline.String()}})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	path := volumesPath(east.Spec.Environment.ID)
	id := uuid.NewString()
	code, body := c.do(http.MethodPost, path+"?id="+id, map[string]any{"spec": storageSpec("frozen", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(east.Spec.Environment.ID, id, "RUNNING", time.Minute)

	east.SetFrozen(true)
	defer east.SetFrozen(false)
	start := time.Now()
	code, body = c.do(http.MethodDelete, path+"/"+id, nil)
	took := time.Since(start)
	c.want(http.StatusServiceUnavailable, code, body)
	if took < deadline/2 || took > deadline+3*time.Second {
		t.Fatalf("a write to a frozen API server answered after %s, want about the %s deadline", took, deadline)
	}
	east.SetFrozen(false)
	c.eventually(time.Minute, "the retried delete accepted", func() bool {
		code, _ := c.do(http.MethodDelete, path+"/"+id, nil)
		return code == http.StatusNoContent || code == http.StatusNotFound
	})
	c.eventually(time.Minute, "the claim gone", func() bool { return claims(t, east, east.Spec.Environment.Namespace, id) == 0 })
}

// TestInterruptedCreateLeavesOneClaim: a gateway killed after recording a
// volume but before creating its PVC left a record and no claim; the client's
// retry completes it with exactly one PVC.
func TestInterruptedCreateLeavesOneClaim(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	id := uuid.NewString()
	spec := map[string]any{"name": "half", "labels": map[string]string{"team": "e2e"}, "capacity": "1Gi",
		"storage_class": "standard", "access_mode": "ReadWriteOnce", "volume_mode": "Filesystem", "namespace": ns}
	raw, _ := json.Marshal(spec)
	if _, err := g.DB.Exec(context.Background(),
		`INSERT INTO volumes (environment_id, id, namespace, spec, status, status_message) VALUES ($1, $2, $3, $4, 'PROVISIONING', 'creating the claim')`,
		envID, id, ns, raw); err != nil {
		t.Fatal(err)
	}
	if n := claims(t, east, ns, id); n != 0 {
		t.Fatalf("precondition: %d claims", n)
	}
	req := map[string]any{"spec": storageSpec("half", "1Gi", nil)}
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+id, req)
	c.want(http.StatusOK, code, body)
	code, body = c.do(http.MethodPost, volumesPath(envID)+"?id="+id, req)
	c.want(http.StatusOK, code, body)
	if n := claims(t, east, ns, id); n != 1 {
		t.Fatalf("%d claims after the retries, want exactly 1", n)
	}
	c.waitStatus(envID, id, "RUNNING", time.Minute)
}

// TestReconcilerRepairsWhatFlowsLeftBehind: without any client retry or
// change of the cluster's health, the reconciler's sweep creates the claim
// of a recorded volume that never got one, marks DELETED a volume whose
// claim was deleted behind the gateway's back, forgets expired idempotency
// keys, and counts another provider's claim that appears (and goes) in an
// environment without volumes.
func TestReconcilerRepairsWhatFlowsLeftBehind(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{ReconcileInterval: time.Second})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east, west := clusters[0], clusters[1]
	c.register(east)
	ctx := context.Background()
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace

	orphan := uuid.NewString()
	spec, _ := json.Marshal(map[string]any{"name": "orphan", "labels": map[string]string{}, "capacity": "1Gi",
		"storage_class": "standard", "access_mode": "ReadWriteOnce", "volume_mode": "Filesystem", "namespace": ns})
	if _, err := g.DB.Exec(ctx, `INSERT INTO volumes (environment_id, id, namespace, spec, create_time, update_time)
		VALUES ($1, $2, $3, $4, now() - interval '2 minutes', now() - interval '2 minutes')`, envID, orphan, ns, spec); err != nil {
		t.Fatal(err)
	}
	gone := uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+gone, map[string]any{"spec": storageSpec("gone", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(envID, gone, "RUNNING", time.Minute)
	if err := east.AdminClient().CoreV1().PersistentVolumeClaims(ns).Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually(time.Minute, "out-of-band deletion in the gateway's cache", func() bool {
		cluster, ok := g.Clusters.Get(envID)
		if !ok {
			return false
		}
		_, exists := cluster.PVC(ns, gone)
		return !exists
	})
	if _, err := g.DB.Exec(ctx, `UPDATE volumes SET update_time = now() - interval '1 minute' WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}

	if _, err := g.DB.Exec(ctx, `INSERT INTO idempotency_keys (environment_id, key, request_sha256, volume_id, create_time)
		VALUES ($1, 'expired', 'x', 'v1', now() - interval '25 hours'), ($1, 'kept', 'x', 'v2', now())`, envID); err != nil {
		t.Fatal(err)
	}

	// Idempotency keys are kept 24 hours, then forgotten.
	c.eventually(10*time.Second, "the expired idempotency key forgotten, the fresh one kept", func() bool {
		keys := pgtest.Column[string](t, g.DB, `SELECT key FROM idempotency_keys WHERE environment_id = $1 AND key IN ('expired', 'kept')`, envID)
		return slices.Equal(keys, []string{"kept"})
	})
	c.eventually(10*time.Second, "the recorded volume's claim created", func() bool { return claims(t, east, ns, orphan) == 1 })
	c.waitStatus(envID, orphan, "RUNNING", time.Minute)
	c.eventually(10*time.Second, "the out-of-band deleted volume recorded DELETED", func() bool {
		var st string
		err := g.DB.QueryRow(ctx, `SELECT status FROM volumes WHERE id = $1`, gone).Scan(&st)
		return err == nil && st == "DELETED"
	})
	code, body = c.do(http.MethodGet, volumesPath(envID)+"/"+gone, nil)
	c.want(http.StatusNotFound, code, body)
	if n := claims(t, east, ns, orphan); n != 1 {
		t.Fatalf("%d claims for the recorded volume, want 1", n)
	}

	// An environment without volumes, in a namespace no other test uses:
	// only the claim in its cache has it looked at.
	tenants, err := west.Tenants(ctx, "sweep", 1)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := west.TenantKubeconfig(tenants[0])
	if err != nil {
		t.Fatal(err)
	}
	westID, westNS := "sweep-west", tenants[0].Namespace
	code, body = c.do(http.MethodPost, "/api/v1alpha1/environments?id="+westID, map[string]any{"kubeconfig": string(kc)})
	c.want(http.StatusCreated, code, body)
	unadopted := func() any {
		_, env := c.do(http.MethodGet, "/api/v1alpha1/environments/"+westID, nil)
		return field(env, "status", "unadopted_volume_count")
	}
	class := "standard-wffc" // no consumer comes: the claim stays as created
	foreign := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "another-providers", Namespace: westNS, Labels: map[string]string{
			"dcm.project/managed-by": "dcm", "dcm.project/dcm-instance-id": "another-providers", "dcm.project/dcm-service-type": "storage"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	claimsAPI := west.AdminClient().CoreV1().PersistentVolumeClaims(westNS)
	// The first count (when the connection synced) is written: from now on
	// only a sweep counts again.
	c.eventually(30*time.Second, "the environment counted once, with no unadopted claim", func() bool {
		counts := pgtest.Column[int](t, g.DB, `SELECT count FROM unadopted_claims WHERE environment_id = $1`, westID)
		return slices.Equal(counts, []int{0}) && unadopted() == float64(0)
	})
	if _, err := claimsAPI.Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually(10*time.Second, "another provider's claim counted", func() bool { return unadopted() == float64(1) })
	if err := claimsAPI.Delete(ctx, foreign.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.eventually(10*time.Second, "its deletion counted", func() bool { return unadopted() == float64(0) })
}

// TestCredentialRotationSwapsTheLiveConnection: a PATCH with new credentials
// replaces the environment's connection without a restart and volumes keep
// working; deleting the environment drops its connection.
func TestCredentialRotationSwapsTheLiveConnection(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	envID := east.Spec.Environment.ID
	before, ok := g.Clusters.Get(envID)
	if !ok {
		t.Fatal("no connection after registration")
	}
	token, err := east.NewGatewayToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	code, body := c.do(http.MethodPatch, "/api/v1alpha1/environments/"+envID, map[string]any{"credentials": map[string]any{
		"server": east.ServerURL(), "certificate_authority_data": east.CAData(), "token": token}})
	c.want(http.StatusOK, code, body)
	c.eventually(30*time.Second, "the new connection to take over", func() bool {
		after, ok := g.Clusters.Get(envID)
		return ok && after != before && after.Health().Synced
	})
	id := uuid.NewString()
	code, body = c.do(http.MethodPost, volumesPath(envID)+"?id="+id, map[string]any{"spec": storageSpec("after", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(envID, id, "RUNNING", time.Minute)
	code, body = c.do(http.MethodDelete, "/api/v1alpha1/environments/"+envID+"?force=true", nil)
	c.want(http.StatusNoContent, code, body)
	c.eventually(10*time.Second, "the deleted environment disconnected", func() bool {
		_, ok := g.Clusters.Get(envID)
		return !ok
	})
	if n := claims(t, east, east.Spec.Environment.Namespace, id); n != 1 {
		t.Fatalf("forcing the environment out deleted its PVC (%d claims)", n)
	}
	g.AssertNoSecret(t, token)
}

// TestConcurrentCreatesConverge: DCM redelivers a create while the first is
// still running, in both request shapes; every answer names the same volume
// and exactly one PVC exists.
func TestConcurrentCreatesConverge(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	c.register(east)
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	const n = 6
	for _, shape := range []struct {
		name    string
		path    string
		body    any
		headers []string
	}{
		{"id", volumesPath(envID) + "?id=" + uuid.NewString(), map[string]any{"spec": storageSpec("race", "1Gi", nil)}, nil},
		{"idempotency key", volumesPath(envID), storageSpec("race", "1Gi", nil), []string{"Idempotency-Key", uuid.NewString()}},
	} {
		t.Run(shape.name, func(t *testing.T) {
			type answer struct {
				code int
				id   string
				err  error
			}
			answers := make(chan answer, n)
			for range n {
				go func() {
					code, body, err := client{t: t, base: g.URL, token: g.Tokens.Admin}.try(http.MethodPost, shape.path, shape.body, shape.headers...)
					id, _ := body["id"].(string)
					answers <- answer{code, id, err}
				}()
			}
			created, first := 0, ""
			for range n {
				a := <-answers
				if a.err != nil {
					t.Fatal(a.err)
				}
				code, id := a.code, a.id
				switch {
				case code == http.StatusCreated:
					created++
				case code != http.StatusOK:
					t.Fatalf("status %d", code)
				}
				if first == "" {
					first = id
				}
				if id != first || id == "" {
					t.Fatalf("answers name different volumes: %q and %q", first, id)
				}
			}
			if created != 1 {
				t.Fatalf("%d answers say created, want 1", created)
			}
			if got := claims(t, east, ns, first); got != 1 {
				t.Fatalf("%d claims, want 1", got)
			}
		})
	}
}

// TestWellKnownDriversLimitAccessModes: on the west cluster (AWS EBS and EFS
// driver names, no annotations), the built-in driver table refuses RWX on an
// EBS class with 422 listing what it supports, and accepts it on EFS.
func TestWellKnownDriversLimitAccessModes(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	west := clusters[1]
	c.register(west)
	path := volumesPath(west.Spec.Environment.ID)
	code, body := c.do(http.MethodPost, path+"?id="+uuid.NewString(),
		map[string]any{"spec": storageSpec("shared", "1Gi", map[string]any{"storage_class": "gp3", "access_mode": "ReadWriteMany"})})
	c.want(http.StatusUnprocessableEntity, code, body, "gp3 does not support ReadWriteMany", "ReadWriteOnce, ReadWriteOncePod")
	code, body = c.do(http.MethodPost, path+"?id="+uuid.NewString(),
		map[string]any{"spec": storageSpec("shared", "1Gi", map[string]any{"storage_class": "efs", "access_mode": "ReadWriteMany"})})
	c.want(http.StatusCreated, code, body)
}
