package volumes

import (
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// storageContract is what the API contract (internal/api/openapi.yaml)
// says of a volume's capacity and labels: DCM's storage contract.
func storageContract(t *testing.T) (capacity string, reserved []string) {
	t.Helper()
	raw, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				StorageSpec struct {
					Properties struct {
						Capacity struct{ Pattern string } `json:"capacity"`
					} `json:"properties"`
				} `json:"StorageSpec"`
				StorageMetadata struct {
					Properties struct {
						Labels struct {
							Reserved []string `json:"x-reserved-keys"`
						} `json:"labels"`
					} `json:"properties"`
				} `json:"StorageMetadata"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	s := doc.Components.Schemas
	return s.StorageSpec.Properties.Capacity.Pattern, s.StorageMetadata.Properties.Labels.Reserved
}

// The gateway accepts exactly what DCM's storage contract accepts, as the
// API contract writes it: every capacity its pattern allows that is a
// positive Kubernetes quantity (each unit the pattern lists, and none:
// bytes), and every label but the reserved keys — other dcm.project/ keys
// included. The cases are made from the contract, so a change there is
// tested here.
func TestRequestsAsTheContractWritesThem(t *testing.T) {
	pattern, reserved := storageContract(t)
	if pattern != CapacityPattern {
		t.Fatalf("the contract's capacity pattern %q is not CapacityPattern %q", pattern, CapacityPattern)
	}
	units := regexp.MustCompile(`\(([A-Za-z|]+)\)\?\$$`).FindStringSubmatch(pattern)
	if units == nil {
		t.Fatalf("no unit alternatives in %q", pattern)
	}
	contract := regexp.MustCompile(pattern)
	var capacities []string
	for _, unit := range append(strings.Split(units[1], "|"), "") {
		for _, number := range []string{"1", "10", "1.5", "0", "0.0"} {
			capacities = append(capacities, number+unit)
		}
	}
	// And what the pattern refuses: another case, an exponent, a sign.
	capacities = append(capacities, "10gi", "1e9", "-1Gi", "+1Gi", "1.Gi", "Gi", "")
	for _, c := range capacities {
		q, err := resource.ParseQuantity(c)
		want := contract.MatchString(c) && err == nil && q.Sign() > 0 && q.CmpInt64(math.MaxInt64) < 0
		r := Request{Name: "data", Capacity: c}
		if got := r.validate() == nil; got != want {
			t.Errorf("capacity %q: accepted %v, want %v (pattern %v, quantity %v)", c, got, want, contract.MatchString(c), err)
		}
	}
	if !slices.Equal(reserved, ReservedLabels) {
		t.Fatalf("the contract reserves %v, the gateway %v", reserved, ReservedLabels)
	}
	for _, key := range append(slices.Clone(reserved), "dcm.project/cost-center", "team", "example.com/owner") {
		r := Request{Name: "data", Capacity: "1Gi", Labels: map[string]string{key: "x"}}
		err := r.validate()
		if slices.Contains(reserved, key) {
			if fe, ok := fault.As(err); !ok || fe.Field != "spec.metadata.labels" {
				t.Errorf("label %s: %v, want refused", key, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("label %s: %v, want accepted", key, err)
		}
		if got := specOf(newPVC("v", Spec{Labels: r.Labels, Capacity: "1Gi"}, east)).Labels; got[key] != "x" {
			t.Errorf("label %s does not come back from the claim: %v", key, got)
		}
	}
}
