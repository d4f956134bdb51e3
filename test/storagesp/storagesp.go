// Package storagesp stands in for DCM's per-cluster storage service
// provider, github.com/dcm-project/k8s-storage-service-provider, whose Go
// module the module proxy does not serve: the migration tests need a site
// running that provider — claims it made, registered in DCM under its name,
// publishing their status — to move onto the gateway, and to see what
// happens when it comes back. It behaves as the provider does at commit
// 85c3e79, refusals included; each behaviour cites the provider's file and
// function it follows. It must never be imported by production code.
//
// What it serves (internal/api/server/server.gen.go, HandlerWithOptions):
// POST, GET /api/v1alpha1/volumes, GET, DELETE /api/v1alpha1/volumes/{id},
// GET /api/v1alpha1/volumes/health; PUT and PATCH answer 405. On every
// start it probes its own health, then registers with DCM's manager and
// starts publishing status (cmd/k8s-storage-service-provider/main.go, run).
package storagesp

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The provider's labels (internal/dcm/labels.go, Labels and
// ReservedLabelKeys).
const (
	managedByLabel   = "dcm.project/managed-by"
	instanceIDLabel  = "dcm.project/dcm-instance-id"
	serviceTypeLabel = "dcm.project/dcm-service-type"
	selector         = managedByLabel + "=dcm," + serviceTypeLabel + "=storage"
)

var reservedLabels = []string{managedByLabel, instanceIDLabel, serviceTypeLabel}

// Options configure a stand-in as the provider's environment configures it
// (internal/config/config.go).
type Options struct {
	// Name is SP_NAME, its provider name in DCM.
	Name string
	// DCMURL is DCM_REGISTRATION_URL (…/api/v1alpha1).
	DCMURL string
	// NATSURL is SP_NATS_URL.
	NATSURL string
	// Client reaches the cluster (SP_K8S_KUBECONFIG).
	Client kubernetes.Interface
	// Namespace is SP_K8S_NAMESPACE: every claim is made there.
	Namespace string
}

// Provider is a stand-in, running or stopped.
type Provider struct {
	Options
	// Endpoint is what it registers: SP_ENDPOINT + /api/v1alpha1/volumes
	// (internal/registration/registration.go, BuildPayload). It stays the
	// same across restarts, as a deployment's address does.
	Endpoint string

	t       testing.TB
	addr    string
	started time.Time

	mu     sync.Mutex
	server *http.Server
	stop   context.CancelFunc
	done   sync.WaitGroup
}

// Start runs a stand-in until the test ends (or Stop): it listens, probes
// its own health, registers with DCM and publishes the status of its
// claims.
func Start(t testing.TB, opts Options) *Provider {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Options: opts, t: t, addr: l.Addr().String()}
	p.Endpoint = "http://" + p.addr + "/api/v1alpha1/volumes"
	p.run(l)
	t.Cleanup(p.Stop)
	return p
}

// Restart starts a stopped stand-in again at the same address: it
// registers again under its name (DCM's manager then points the name at it
// again) and publishes every claim's status anew.
func (p *Provider) Restart() {
	p.t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the old listener's port may take a moment to free
		if l, err = (&net.ListenConfig{}).Listen(p.t.Context(), "tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.run(l)
}

// run serves on l and, once its health answers, registers and monitors
// (main.go, run: the onReady callback of internal/apiserver/server.go).
func (p *Provider) run(l net.Listener) {
	ctx, stop := context.WithCancel(context.Background())
	p.started = time.Now()
	mux := http.NewServeMux()
	const base = "/api/v1alpha1/volumes"
	mux.HandleFunc("POST "+base, p.create)
	mux.HandleFunc("GET "+base, p.list)
	mux.HandleFunc("GET "+base+"/health", p.health)
	mux.HandleFunc("GET "+base+"/{id}", p.get)
	mux.HandleFunc("DELETE "+base+"/{id}", p.delete)
	// No update: PUT and PATCH answer 405 with an empty body (the router
	// has no such route).
	mux.HandleFunc(base+"/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusMethodNotAllowed) })
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	p.mu.Lock()
	p.server, p.stop = server, stop
	p.mu.Unlock()
	p.done.Go(func() { _ = server.Serve(l) })
	p.done.Go(func() {
		if !p.selfProbe(ctx) {
			return // main.go: a failed readiness probe skips registration and monitoring
		}
		p.done.Go(func() { p.register(ctx) })
		p.monitor(ctx)
	})
}

// Stop stops it, as stopping the provider's process does: pending status
// events are flushed first (internal/monitoring/monitor.go, Stop).
func (p *Provider) Stop() {
	p.mu.Lock()
	server, stop := p.server, p.stop
	p.server, p.stop = nil, nil
	p.mu.Unlock()
	if server == nil {
		return
	}
	stop()
	_ = server.Close()
	p.done.Wait()
}

// selfProbe polls its own health every 50 ms for up to 5 s
// (internal/apiserver/server.go, waitForReady).
func (p *Provider) selfProbe(ctx context.Context) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Endpoint+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// register registers the provider with DCM, without an id, retrying
// network errors and 5xx with a backoff from 1 s doubling to 60 s and
// giving up on any 4xx (internal/registration/registration.go, run,
// register, BuildPayload).
func (p *Provider) register(ctx context.Context) {
	client, err := spmclient.NewClientWithResponses(p.DCMURL)
	if err != nil {
		p.t.Errorf("storagesp: DCM client: %v", err)
		return
	}
	operations := []string{"CREATE", "READ", "DELETE"}
	// No display name: the provider sends one only with SP_DISPLAY_NAME.
	body := spmapi.Provider{Name: p.Name, ServiceType: "storage", SchemaVersion: "v1alpha1", Endpoint: p.Endpoint, Operations: &operations}
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		resp, err := client.CreateProviderWithResponse(ctx, nil, body)
		switch {
		case err == nil && (resp.JSON200 != nil || resp.JSON201 != nil):
			return
		case err == nil && resp.StatusCode() >= 400 && resp.StatusCode() < 500:
			return // not retryable: logged and given up
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// health answers 200, healthy while the cluster answers
// (internal/handlers/health/handler.go, GetHealth;
// internal/kubernetes/store.go, CheckHealth).
func (p *Provider) health(w http.ResponseWriter, _ *http.Request) {
	status := "healthy"
	if _, err := p.Client.Discovery().ServerVersion(); err != nil {
		status = "unhealthy"
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": "health", "status": status,
		"type": "k8s-storage-service-provider.dcm.io/health", "uptime": int(time.Since(p.started).Seconds()), "version": "0.0.1-dev"})
}

// Patterns of the provider's contract (api/v1alpha1/openapi.yaml), which its
// validation middleware enforces before a handler runs.
var (
	idPattern       = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	namePattern     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	capacityPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(Ei|Pi|Ti|Gi|Mi|Ki|E|P|T|G|M|K)?$`)
	accessModes     = []string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"}
	volumeModes     = []string{"Filesystem", "Block"}
)

// problem is the provider's RFC 9457 body (api/v1alpha1/types.gen.go, Error).
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// badRequest is a refusal of the validation middleware: title "Bad
// Request", the request URI as instance (internal/apiserver/server.go,
// newBadRequestHandler, scrubValidationError).
func badRequest(w http.ResponseWriter, r *http.Request, detail string) {
	writeProblem(w, problem{Type: "INVALID_ARGUMENT", Title: "Bad Request", Status: http.StatusBadRequest, Detail: detail, Instance: r.RequestURI})
}

// invalid is a handler's refusal (internal/handlers/volume/errors.go,
// newCreateError400).
func invalid(w http.ResponseWriter, detail string) {
	writeProblem(w, problem{Type: "INVALID_ARGUMENT", Title: "Invalid argument", Status: http.StatusBadRequest, Detail: detail,
		Instance: "/api/v1alpha1/volumes"})
}

// create validates as the middleware and the handler do, then makes the
// claim (internal/handlers/volume/handler.go, CreateVolume;
// internal/handlers/volume/validation.go; internal/kubernetes/store_create.go,
// Create; internal/kubernetes/convert.go, buildPVC).
func (p *Provider) create(w http.ResponseWriter, r *http.Request) {
	spec, id, refused := p.validate(w, r)
	if refused {
		return
	}
	hints, _ := spec["provider_hints"].(map[string]any)
	k8s, _ := hints["kubernetes"].(map[string]any)
	hint := func(k string) string { s, _ := k8s[k].(string); return s }
	// The class: the hint, else SP_K8S_DEFAULT_STORAGE_CLASS (unset here),
	// else none, the cluster's default applying; a named class must exist
	// (store_create.go, Create).
	class := hint("storage_class")
	if class != "" {
		if _, err := p.Client.StorageV1().StorageClasses().Get(r.Context(), class, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			writeProblem(w, problem{Type: "FAILED_PRECONDITION", Title: "Failed precondition", Status: http.StatusUnprocessableEntity,
				Detail: fmt.Sprintf("StorageClass %q does not exist", class), Instance: "/api/v1alpha1/volumes"})
			return
		}
	}
	capacity, err := resource.ParseQuantity(spec["capacity"].(string))
	if err != nil {
		invalid(w, fmt.Sprintf("invalid capacity %q: %v", spec["capacity"], err))
		return
	}
	meta, _ := spec["metadata"].(map[string]any)
	// User labels, then the provider's, which win (labels.go, mergeLabels).
	labels := map[string]string{}
	if user, ok := meta["labels"].(map[string]any); ok {
		for k, v := range user {
			labels[k], _ = v.(string)
		}
	}
	labels[managedByLabel], labels[instanceIDLabel], labels[serviceTypeLabel] = "dcm", id, "storage"
	// The access mode: the hint, else SP_K8S_DEFAULT_ACCESS_MODE's default
	// (convert.go, resolveAccessMode).
	mode := corev1.ReadWriteOnce
	if h := hint("access_mode"); h != "" {
		mode = corev1.PersistentVolumeAccessMode(h)
	}
	pvc := &corev1.PersistentVolumeClaim{
		// No annotations: the provider sets none.
		ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: p.Namespace, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacity}},
		},
	}
	if class != "" {
		pvc.Spec.StorageClassName = &class
	}
	// The volume mode only from the hint: the API server defaults it.
	if m := hint("volume_mode"); m != "" {
		vm := corev1.PersistentVolumeMode(m)
		pvc.Spec.VolumeMode = &vm
	}
	created, err := p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Create(r.Context(), pvc, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		writeProblem(w, problem{Type: "ALREADY_EXISTS", Title: "Already exists", Status: http.StatusConflict,
			Detail: fmt.Sprintf("volume %q already exists", id), Instance: "/api/v1alpha1/volumes"})
		return
	case err != nil:
		writeProblem(w, problem{Type: "INTERNAL", Title: "Internal Server Error", Status: http.StatusInternalServerError,
			Detail: "an unexpected error occurred", Instance: "/api/v1alpha1/volumes"})
		return
	}
	writeJSON(w, http.StatusCreated, volumeOf(created))
}

// validate checks a create as the provider's middleware (the contract's
// schema) and then its handler do, answering a refusal itself; it returns
// the spec and the volume id.
func (p *Provider) validate(w http.ResponseWriter, r *http.Request) (map[string]any, string, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		badRequest(w, r, fmt.Sprintf("request body: header Content-Type has unexpected value %q", ct))
		return nil, "", true
	}
	query := r.URL.Query()
	if ids, given := query["id"]; given {
		switch {
		case len(ids) > 1:
			badRequest(w, r, `invalid format for parameter "id"`)
			return nil, "", true
		case ids[0] == "":
			badRequest(w, r, `parameter "id" in query: minimum string length is 1`)
			return nil, "", true
		case len(ids[0]) > 63:
			badRequest(w, r, `parameter "id" in query: maximum string length is 63`)
			return nil, "", true
		case !idPattern.MatchString(ids[0]):
			badRequest(w, r, fmt.Sprintf(`parameter "id" in query: string doesn't match the regular expression %q`, idPattern))
			return nil, "", true
		}
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		badRequest(w, r, "request body: "+err.Error())
		return nil, "", true
	}
	if detail := schemaRefusal(body); detail != "" {
		badRequest(w, r, "request body: "+detail)
		return nil, "", true
	}
	spec := body["spec"].(map[string]any)
	name := spec["metadata"].(map[string]any)["name"].(string)
	id := name
	if q := query.Get("id"); q != "" {
		if q != name {
			invalid(w, "id query parameter must match metadata.name")
			return nil, "", true
		}
		id = q
	}
	switch {
	case id == "health":
		invalid(w, `volume ID "health" is reserved and cannot be used`)
		return nil, "", true
	case !idPattern.MatchString(id):
		invalid(w, fmt.Sprintf("volume ID %q must match AEP-122 pattern", id))
		return nil, "", true
	}
	if labels, ok := spec["metadata"].(map[string]any)["labels"].(map[string]any); ok {
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			if slices.Contains(reservedLabels, k) {
				invalid(w, fmt.Sprintf("label %q is reserved by DCM and cannot be set by the user", k))
				return nil, "", true
			}
		}
	}
	return spec, id, false
}

// schemaRefusal is what the contract's schema refuses in a create body
// (api/v1alpha1/openapi.yaml, Volume and StorageSpec), "" when it holds.
func schemaRefusal(body map[string]any) string {
	if body == nil {
		return "Value is not nullable"
	}
	for _, k := range []string{"id", "path", "status", "create_time", "update_time"} {
		if _, ok := body[k]; ok {
			return "doesn't match schema #/components/schemas/Volume"
		}
	}
	raw, ok := body["spec"]
	if !ok {
		return `property "spec" is missing`
	}
	spec, ok := raw.(map[string]any)
	if !ok {
		return "Value is not nullable"
	}
	for _, k := range []string{"service_type", "capacity", "metadata"} {
		if _, ok := spec[k]; !ok {
			return fmt.Sprintf("property %q is missing", k)
		}
	}
	if spec["service_type"] != "storage" {
		return `value is not one of the allowed values ["storage"]`
	}
	capacity, ok := spec["capacity"].(string)
	if !ok {
		return "value must be a string"
	}
	if !capacityPattern.MatchString(capacity) {
		return fmt.Sprintf("string doesn't match the regular expression %q", capacityPattern)
	}
	meta, ok := spec["metadata"].(map[string]any)
	if !ok {
		return "value must be an object"
	}
	for _, k := range []string{"namespace", "storage_class", "volume_name"} {
		if _, ok := meta[k]; ok {
			return "doesn't match schema #/components/schemas/Volume"
		}
	}
	name, ok := meta["name"].(string)
	switch {
	case !ok:
		return `property "name" is missing`
	case name == "":
		return "minimum string length is 1"
	case len(name) > 63:
		return "maximum string length is 63"
	case !namePattern.MatchString(name):
		return fmt.Sprintf("string doesn't match the regular expression %q", namePattern)
	}
	if labels, ok := meta["labels"].(map[string]any); ok {
		for _, v := range labels {
			if _, ok := v.(string); !ok {
				return "value must be a string"
			}
		}
	}
	hints, _ := spec["provider_hints"].(map[string]any)
	raw, given := hints["kubernetes"]
	if !given {
		return ""
	}
	k8s, ok := raw.(map[string]any)
	if !ok {
		return "Value is not nullable"
	}
	for k := range k8s {
		if !slices.Contains([]string{"storage_class", "access_mode", "volume_mode"}, k) {
			return fmt.Sprintf("property %q is unsupported", k)
		}
	}
	if m, ok := k8s["access_mode"]; ok && !slices.Contains(accessModes, fmt.Sprint(m)) {
		return `value is not one of the allowed values ["ReadWriteOnce","ReadOnlyMany","ReadWriteMany"]`
	}
	if m, ok := k8s["volume_mode"]; ok && !slices.Contains(volumeModes, fmt.Sprint(m)) {
		return `value is not one of the allowed values ["Filesystem","Block"]`
	}
	return ""
}

// get answers one volume, 404 for a claim it does not manage
// (internal/kubernetes/store_get.go, Get; store.go, findPVC).
func (p *Provider) get(w http.ResponseWriter, r *http.Request) {
	pvc, ok := p.find(w, r)
	if ok {
		writeJSON(w, http.StatusOK, volumeOf(pvc))
	}
}

// delete deletes the claim and answers 204 without waiting for it to go;
// 404 for one it does not manage (internal/kubernetes/store_delete.go,
// Delete).
func (p *Provider) delete(w http.ResponseWriter, r *http.Request) {
	pvc, ok := p.find(w, r)
	if !ok {
		return
	}
	if err := p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Delete(r.Context(), pvc.Name, metav1.DeleteOptions{}); err != nil &&
		!apierrors.IsNotFound(err) {
		writeProblem(w, problem{Type: "INTERNAL", Title: "Internal Server Error", Status: http.StatusInternalServerError,
			Detail: "an unexpected error occurred", Instance: r.URL.Path})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// find reads the claim of the path's id, answering 400 or 404 itself.
func (p *Provider) find(w http.ResponseWriter, r *http.Request) (*corev1.PersistentVolumeClaim, bool) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		badRequest(w, r, fmt.Sprintf(`parameter "volume_id" in path: string doesn't match the regular expression %q`, idPattern))
		return nil, false
	}
	pvc, err := p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Get(r.Context(), id, metav1.GetOptions{})
	if err != nil || pvc.Labels[managedByLabel] != "dcm" || pvc.Labels[serviceTypeLabel] != "storage" || pvc.Labels[instanceIDLabel] != id {
		writeProblem(w, problem{Type: "NOT_FOUND", Title: "Not found", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("volume %q not found", id), Instance: r.URL.Path})
		return nil, false
	}
	return pvc, true
}

// list answers its claims a page at a time (internal/kubernetes/store_list.go,
// List).
func (p *Provider) list(w http.ResponseWriter, r *http.Request) {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: 50, Continue: r.URL.Query().Get("page_token")}
	list, err := p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).List(r.Context(), opts)
	if err != nil {
		badRequest(w, r, "invalid page_token")
		return
	}
	volumes := []any{}
	for i := range list.Items {
		if list.Items[i].Labels[instanceIDLabel] == list.Items[i].Name {
			volumes = append(volumes, volumeOf(&list.Items[i]))
		}
	}
	out := map[string]any{"volumes": volumes}
	if list.Continue != "" {
		out["next_page_token"] = list.Continue
	}
	writeJSON(w, http.StatusOK, out)
}

// volumeOf is a volume as the provider answers it, rebuilt from its claim
// (internal/kubernetes/convert.go, volumeFromPVC, providerHintsFromPVC,
// userLabelsFromPVC, latestPVCConditionTime).
func volumeOf(pvc *corev1.PersistentVolumeClaim) map[string]any {
	meta := map[string]any{"name": pvc.Name, "namespace": pvc.Namespace}
	k8s := map[string]any{}
	if c := pvc.Spec.StorageClassName; c != nil {
		meta["storage_class"], k8s["storage_class"] = *c, *c
	}
	if pvc.Spec.VolumeName != "" {
		meta["volume_name"] = pvc.Spec.VolumeName
	}
	labels := map[string]string{}
	for k, v := range pvc.Labels {
		if !slices.Contains(reservedLabels, k) {
			labels[k] = v
		}
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if m := pvc.Spec.VolumeMode; m != nil {
		k8s["volume_mode"] = string(*m)
	}
	if len(pvc.Spec.AccessModes) > 0 {
		k8s["access_mode"] = string(pvc.Spec.AccessModes[0])
	}
	updated := pvc.CreationTimestamp.Time
	for _, c := range pvc.Status.Conditions {
		if c.LastTransitionTime.After(updated) {
			updated = c.LastTransitionTime.Time
		}
	}
	requested := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	status, _ := statusOf(pvc)
	return map[string]any{
		"id": pvc.Name, "path": "volumes/" + pvc.Name, "status": status,
		"create_time": pvc.CreationTimestamp.UTC().Format(time.RFC3339), "update_time": updated.UTC().Format(time.RFC3339),
		"spec": map[string]any{"service_type": "storage", "capacity": requested.String(), "metadata": meta,
			"provider_hints": map[string]any{"kubernetes": k8s}},
	}
}

// statusOf maps a claim to DCM's status and message
// (internal/kubernetes/convert.go, MapPVCToStatus).
func statusOf(pvc *corev1.PersistentVolumeClaim) (string, string) {
	switch {
	case pvc == nil:
		return "DELETED", "resource no longer exists"
	case pvc.DeletionTimestamp != nil:
		return "DELETING", "PVC is terminating"
	case pvc.Status.Phase == corev1.ClaimPending:
		return "PROVISIONING", "PVC is pending binding"
	case pvc.Status.Phase == corev1.ClaimLost:
		return "FAILED", "PVC is lost"
	case pvc.Status.Phase == corev1.ClaimBound:
		for _, c := range pvc.Status.Conditions {
			switch {
			case c.Status != corev1.ConditionTrue:
			case c.Type == corev1.PersistentVolumeClaimResizing:
				return "PROVISIONING", "volume expansion in progress"
			case c.Type == corev1.PersistentVolumeClaimFileSystemResizePending:
				return "PROVISIONING", "filesystem resize pending"
			}
		}
		if pvc.Spec.VolumeName == "" {
			return "RUNNING", "PVC is bound"
		}
		return "RUNNING", "PVC is bound to volume " + pvc.Spec.VolumeName
	}
	return "PROVISIONING", string(pvc.Status.Phase)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// event is the provider's status CloudEvent, structured JSON
// (internal/monitoring/event.go, NewStatusCloudEvent).
func (p *Provider) event(id, status, message string) []byte {
	b, _ := json.Marshal(map[string]any{
		"specversion": "1.0", "id": uuid.NewString(), "source": "dcm/providers/" + p.Name, "type": "dcm.status.storage",
		"subject": "dcm.storage", "datacontenttype": "application/json", "time": time.Now().UTC().Format(time.RFC3339Nano),
		"data": map[string]string{"id": id, "status": status, "message": message},
	})
	return b
}

// natsConn connects as the provider does: retrying, reconnecting forever
// (internal/monitoring/publisher.go, NewNATSPublisher).
func (p *Provider) natsConn() (*nats.Conn, error) {
	return nats.Connect(p.NATSURL, nats.MaxReconnects(-1), nats.ReconnectWait(2*time.Second), nats.RetryOnFailedConnect(true))
}
