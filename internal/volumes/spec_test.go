package volumes

import (
	"slices"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

func TestRequestValidation(t *testing.T) {
	ok := Request{Name: "data", Capacity: "10Gi", Labels: map[string]string{"team": "a"}}
	tests := []struct {
		name  string
		edit  func(*Request)
		field string
	}{
		{"valid", func(*Request) {}, ""},
		{"decimal suffix", func(r *Request) { r.Capacity = "500M" }, ""},
		{"fraction", func(r *Request) { r.Capacity = "1.5Gi" }, ""},
		{"no suffix: bytes", func(r *Request) { r.Capacity = "1073741824" }, ""},
		{"kubernetes' decimal kilo, which the contract spells K", func(r *Request) { r.Capacity = "1k" }, "spec.capacity"},
		{"the contract's decimal K, which is no Kubernetes unit", func(r *Request) { r.Capacity = "1K" }, "spec.capacity"},
		{"larger than a claim can be (clamped by Kubernetes)", func(r *Request) { r.Capacity = "99999999Ei" }, "spec.capacity"},
		{"larger than a claim can be, decimal", func(r *Request) { r.Capacity = "99999999E" }, "spec.capacity"},
		{"exactly 8Ei", func(r *Request) { r.Capacity = "8Ei" }, "spec.capacity"},
		{"just under 8Ei", func(r *Request) { r.Capacity = "7Ei" }, ""},
		{"exponent", func(r *Request) { r.Capacity = "1e9" }, "spec.capacity"},
		{"zero", func(r *Request) { r.Capacity = "0Gi" }, "spec.capacity"},
		{"negative", func(r *Request) { r.Capacity = "-1Gi" }, "spec.capacity"},
		{"bad name", func(r *Request) { r.Name = "Data_1" }, "spec.metadata.name"},
		{"reserved label", func(r *Request) { r.Labels = map[string]string{"dcm.project/dcm-instance-id": "y"} }, "spec.metadata.labels"},
		{"another dcm.project/ label", func(r *Request) { r.Labels = map[string]string{"dcm.project/cost-center": "y"} }, ""},
		{"bad label", func(r *Request) { r.Labels = map[string]string{"a b": "y"} }, "spec.metadata.labels"},
		{"bad class", func(r *Request) { r.Hints.StorageClass = "Gold!" }, "spec.provider_hints.kubernetes.storage_class"},
		{"bad access mode", func(r *Request) { r.Hints.AccessMode = "ReadWriteOncePod" }, "spec.provider_hints.kubernetes.access_mode"},
		{"bad volume mode", func(r *Request) { r.Hints.VolumeMode = "Tape" }, "spec.provider_hints.kubernetes.volume_mode"},
		{"bad namespace", func(r *Request) { r.Hints.Namespace = "Kube_System" }, "spec.provider_hints.kubernetes.namespace"},
		{"a snapshot source", func(r *Request) { r.Hints.Source = &Source{Snapshot: "nightly-1"} }, ""},
		{"a volume source", func(r *Request) { r.Hints.Source = &Source{Volume: "db-1"} }, ""},
		{"an empty source", func(r *Request) { r.Hints.Source = &Source{} }, "spec.provider_hints.kubernetes.source"},
		{"two sources", func(r *Request) { r.Hints.Source = &Source{Snapshot: "s", Volume: "v"} }, "spec.provider_hints.kubernetes.source"},
		{"a bad snapshot id", func(r *Request) { r.Hints.Source = &Source{Snapshot: "S!"} }, "spec.provider_hints.kubernetes.source.snapshot"},
		{"a bad volume id", func(r *Request) { r.Hints.Source = &Source{Volume: "V!"} }, "spec.provider_hints.kubernetes.source.volume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.edit(&r)
			err := r.validate()
			fe, isFault := fault.As(err)
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("validate() = %v", err)
			case tt.field != "" && (!isFault || fe.Kind != fault.InvalidArgument || fe.Field != tt.field):
				t.Fatalf("validate() = %v, want InvalidArgument on %s", err, tt.field)
			}
		})
	}
}

func TestDifferencesNameOnlyWhatChanged(t *testing.T) {
	stored := Spec{Name: "data", Labels: map[string]string{}, Capacity: "1Gi", StorageClass: "standard",
		AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem", Namespace: "dcm"}
	tests := []struct {
		name string
		req  Request
		want []string
	}{
		{"same, hints left open", Request{Name: "data", Capacity: "1Gi"}, nil},
		{"same size spelled differently", Request{Name: "data", Capacity: "1024Mi"}, nil},
		{"same hints", Request{Name: "data", Capacity: "1Gi", Hints: Hints{StorageClass: "standard", Namespace: "dcm"}}, nil},
		{"bigger", Request{Name: "data", Capacity: "2Gi"}, []string{"spec.capacity"}},
		{"other class and name", Request{Name: "other", Capacity: "1Gi", Hints: Hints{StorageClass: "fast"}},
			[]string{"spec.metadata.name", "spec.provider_hints.kubernetes.storage_class"}},
		{"labels", Request{Name: "data", Capacity: "1Gi", Labels: map[string]string{"a": "b"}}, []string{"spec.metadata.labels"}},
		{"a source it was not made from", Request{Name: "data", Capacity: "1Gi", Hints: Hints{Source: &Source{Volume: "v"}}},
			[]string{"spec.provider_hints.kubernetes.source"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.req.differences(stored); !slices.Equal(got, tt.want) {
				t.Fatalf("differences = %v, want %v", got, tt.want)
			}
		})
	}
	restored := stored
	restored.Source = &Source{Snapshot: "nightly-1"}
	if got := (Request{Name: "data", Capacity: "1Gi", Hints: Hints{Source: &Source{Snapshot: "nightly-1"}}}).differences(restored); got != nil {
		t.Fatalf("the same source differs: %v", got)
	}
	if got := (Request{Name: "data", Capacity: "1Gi"}).differences(restored); !slices.Equal(got, []string{"spec.provider_hints.kubernetes.source"}) {
		t.Fatalf("a replay without the source: %v", got)
	}
}
