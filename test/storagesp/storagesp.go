// Package storagesp stands in for DCM's per-cluster storage service
// provider, github.com/dcm-project/k8s-storage-service-provider, whose Go
// module the module proxy does not serve: the migration tests need a
// cluster full of the claims that provider made, registered in DCM under
// its name, to move onto the gateway. It creates exactly the claims the
// provider creates at commit 85c3e79 (cited per field below) in one
// namespace, answers DCM's health checks, registers itself with DCM's
// service-provider-manager as the provider does, and publishes nothing else
// (no status events). It must never be imported by production code.
package storagesp

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	spmclient "github.com/dcm-project/service-provider-manager/pkg/client/provider"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The provider's labels (internal/dcm/labels.go:6-12 at 85c3e79).
const (
	managedByLabel   = "dcm.project/managed-by"
	instanceIDLabel  = "dcm.project/dcm-instance-id"
	serviceTypeLabel = "dcm.project/dcm-service-type"
)

// Provider is a running stand-in.
type Provider struct {
	// Name is its provider name in DCM (the provider's SP_NAME).
	Name string
	// Endpoint is what it registers: its base URL + /api/v1alpha1/volumes
	// (internal/registration/registration.go:29-37).
	Endpoint string
	// ProviderID is the id DCM gave it.
	ProviderID string

	server    *httptest.Server
	client    kubernetes.Interface
	namespace string
}

// Start serves a stand-in named name that creates claims in namespace
// through client (the provider's SP_K8S_NAMESPACE, config.go:37) and
// registers it with the service-provider-manager at dcmURL. It stops when
// the test ends, or at Stop.
func Start(t testing.TB, name, dcmURL string, client kubernetes.Interface, namespace string) *Provider {
	t.Helper()
	p := &Provider{Name: name, client: client, namespace: namespace}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1alpha1/volumes", p.create)
	// DCM's health check: {endpoint}/health (api/v1alpha1/openapi.yaml:129-142).
	mux.HandleFunc("GET /api/v1alpha1/volumes/health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"type": "storage", "status": "healthy", "path": "volumes/health", "version": "stand-in", "uptime": 0})
	})
	p.server = httptest.NewServer(mux)
	t.Cleanup(p.Stop)
	p.Endpoint = p.server.URL + "/api/v1alpha1/volumes"

	// The registration body (internal/registration/registration.go:22-39, 101-129).
	spm, err := spmclient.NewClientWithResponses(dcmURL)
	if err != nil {
		t.Fatal(err)
	}
	operations := []string{"CREATE", "READ", "DELETE"}
	resp, err := spm.CreateProviderWithResponse(t.Context(), nil, spmapi.Provider{
		Name: name, DisplayName: &name, ServiceType: "storage", SchemaVersion: "v1alpha1",
		Endpoint: p.Endpoint, Operations: &operations,
	})
	if err != nil {
		t.Fatal(err)
	}
	created := resp.JSON201
	if created == nil {
		created = resp.JSON200
	}
	if created == nil || created.Id == nil {
		t.Fatalf("register %s with DCM: HTTP %d %s", name, resp.StatusCode(), resp.Body)
	}
	p.ProviderID = *created.Id
	return p
}

// Stop stops serving, as stopping the provider's process does.
func (p *Provider) Stop() { p.server.Close() }

// request is DCM's create body: {"spec": StorageSpec}.
type request struct {
	Spec struct {
		ServiceType string `json:"service_type"`
		Capacity    string `json:"capacity"`
		Metadata    struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		ProviderHints struct {
			Kubernetes struct {
				StorageClass string `json:"storage_class"`
				AccessMode   string `json:"access_mode"`
				VolumeMode   string `json:"volume_mode"`
			} `json:"kubernetes"`
		} `json:"provider_hints"`
	} `json:"spec"`
}

// create makes the provider's claim for a DCM instance
// (handlers/volume/handler.go:41-47, store_create.go:14-48,
// kubernetes/convert.go:106-149).
func (p *Provider) create(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": err.Error()})
		return
	}
	s := req.Spec
	// ?id= must equal spec.metadata.name, which names the claim (handler.go:41-47, convert.go:119).
	if id := r.URL.Query().Get("id"); s.ServiceType != "storage" || s.Metadata.Name == "" || id != "" && id != s.Metadata.Name {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "id must equal spec.metadata.name; service_type must be storage"})
		return
	}
	capacity, err := resource.ParseQuantity(s.Capacity)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "capacity: " + err.Error()})
		return
	}
	// User labels, then the provider's, which win (kubernetes/labels.go:21-26).
	labels := maps.Clone(s.Metadata.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[managedByLabel] = "dcm"
	labels[instanceIDLabel] = s.Metadata.Name
	labels[serviceTypeLabel] = "storage"
	// Access mode: the hint, else ReadWriteOnce (SP_K8S_DEFAULT_ACCESS_MODE's default, config.go:40).
	mode := corev1.ReadWriteOnce
	if h := s.ProviderHints.Kubernetes.AccessMode; h != "" {
		mode = corev1.PersistentVolumeAccessMode(h)
	}
	pvc := &corev1.PersistentVolumeClaim{
		// No annotations: the provider sets none.
		ObjectMeta: metav1.ObjectMeta{Name: s.Metadata.Name, Namespace: p.namespace, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: capacity}},
		},
	}
	// The class only when named (no SP_K8S_DEFAULT_STORAGE_CLASS here):
	// otherwise the cluster's default class applies (convert.go:133-136).
	if c := s.ProviderHints.Kubernetes.StorageClass; c != "" {
		pvc.Spec.StorageClassName = &c
	}
	// The volume mode only when given (convert.go:138-159).
	if m := s.ProviderHints.Kubernetes.VolumeMode; m != "" {
		vm := corev1.PersistentVolumeMode(m)
		pvc.Spec.VolumeMode = &vm
	}
	created, err := p.client.CoreV1().PersistentVolumeClaims(p.namespace).Create(r.Context(), pvc, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		writeJSON(w, http.StatusConflict, map[string]string{"detail": "exists"})
		return
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"detail": err.Error()})
		return
	}
	// Its answer: the volume as the claim shows it (convert.go:59-104); a
	// new claim is Pending, PROVISIONING (convert.go:16-42).
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": created.Name, "path": "volumes/" + created.Name, "status": "PROVISIONING",
		"spec": map[string]any{"service_type": "storage", "capacity": s.Capacity, "metadata": map[string]any{"name": created.Name, "namespace": p.namespace}},
	})
}

// Claims lists the claims the stand-in made, by name.
func (p *Provider) Claims(ctx context.Context) ([]corev1.PersistentVolumeClaim, error) {
	list, err := p.client.CoreV1().PersistentVolumeClaims(p.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: managedByLabel + "=dcm," + serviceTypeLabel + "=storage",
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
