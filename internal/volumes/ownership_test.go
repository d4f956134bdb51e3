package volumes

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// east is the environment the decisions in these tests are made for.
var east = owner{installation: "11111111-1111-1111-1111-111111111111", environment: "east"}

// unlabelled makes p a claim of a gateway from before claims named their
// owner.
func unlabelled(p *corev1.PersistentVolumeClaim) {
	delete(p.Labels, InstallationLabel)
	delete(p.Labels, EnvironmentLabel)
}

// claimFor is east's claim for volume v of spec, of uid, changed by edit
// (when set).
func claimFor(spec Spec, uid string, edit func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := newPVC("v", spec, east)
	pvc.UID = types.UID(uid)
	if edit != nil {
		edit(pvc)
	}
	return pvc
}

// TestWhoseAClaimIs: a claim is an environment's own only when its owner
// labels name both the environment and the installation, or — a claim
// from before claims named their owner, or an adopted one — when the
// environment's record holds it by uid; a name match alone never makes it
// so.
func TestWhoseAClaimIs(t *testing.T) {
	spec := Spec{Name: "v", Namespace: "dcm", Capacity: "1Gi", StorageClass: "fast", AccessMode: "ReadWriteOnce"}
	claim := func(edit func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		return claimFor(spec, "uid-1", edit)
	}
	keep := func(*corev1.PersistentVolumeClaim) {}
	provider := func(p *corev1.PersistentVolumeClaim) {
		unlabelled(p)
		delete(p.Annotations, displayNameAnnotation)
	}
	for _, tt := range []struct {
		name     string
		claim    *corev1.PersistentVolumeClaim
		recorded string // the uid the environment's record holds
		want     holder
	}{
		{"labelled for the environment", claim(keep), "", heldHere},
		{"labelled for it, another uid recorded", claim(keep), "uid-9", heldHere},
		{"labelled for another environment", claim(func(p *corev1.PersistentVolumeClaim) { p.Labels[EnvironmentLabel] = "west" }), "", heldElsewhere},
		{"labelled for another environment, even with the uid recorded", claim(func(p *corev1.PersistentVolumeClaim) { p.Labels[EnvironmentLabel] = "west" }), "uid-1", heldElsewhere},
		{"labelled for another installation", claim(func(p *corev1.PersistentVolumeClaim) { p.Labels[InstallationLabel] = "staging" }), "", heldElsewhere},
		{"half labelled", claim(func(p *corev1.PersistentVolumeClaim) { delete(p.Labels, InstallationLabel) }), "uid-1", heldElsewhere},
		{"made before owners were named, held by the record", claim(unlabelled), "uid-1", heldHere},
		{"made before owners were named, not held", claim(unlabelled), "", heldUnlabelled},
		{"made before owners were named, another uid held", claim(unlabelled), "uid-9", heldUnlabelled},
		{"DCM's storage SP's, held by the record (adopted)", claim(provider), "uid-1", heldHere},
		{"DCM's storage SP's, not held", claim(provider), "", heldByProvider},
		{"made by hand", claim(func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"app": "x"} }), "uid-1", heldByNobody},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := east.holderOf(tt.claim, "v", tt.recorded); got != tt.want {
				t.Fatalf("holderOf = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestACreateMeetingAClaimOfItsName: a create that finds a claim of its
// name answers with it only when it is the environment's own and, unless
// its record already held it, asks for what the claim is; otherwise 409
// naming who holds it or the field that differs.
func TestACreateMeetingAClaimOfItsName(t *testing.T) {
	spec := Spec{Name: "v", Namespace: "dcm", Capacity: "1Gi", StorageClass: "gp3", AccessMode: "ReadWriteOnce", VolumeMode: "Filesystem"}
	claim := func(uid string, edit func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		return claimFor(spec, uid, edit)
	}
	wants := func(edit func(*Spec)) record {
		s := spec
		edit(&s)
		return record{EnvironmentID: "east", ID: "v", Spec: s}
	}
	asked := wants(func(*Spec) {})
	for _, tt := range []struct {
		name    string
		claim   *corev1.PersistentVolumeClaim
		rec     record
		refused []string // parts of the detail; nil: answered
	}{
		{"its own claim, as asked", claim("uid-1", nil), asked, nil},
		{"its own claim, the size written otherwise", claim("uid-1", nil), wants(func(s *Spec) { s.Capacity = "1024Mi" }), nil},
		{"its own claim, recorded, since expanded", claim("uid-1", func(p *corev1.PersistentVolumeClaim) {
			p.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Gi")
		}), record{EnvironmentID: "east", ID: "v", Spec: spec, PVCUID: "uid-1"}, nil},
		{"its own claim, another size and class asked", claim("uid-1", nil),
			wants(func(s *Spec) { s.Capacity, s.StorageClass = "5Gi", "io2-block" }), []string{"spec.capacity", "storage_class", "different spec"}},
		{"its own claim, another access mode asked", claim("uid-1", nil), wants(func(s *Spec) { s.AccessMode = "ReadWriteMany" }), []string{"access_mode"}},
		{"its own claim, another volume mode asked", claim("uid-1", nil), wants(func(s *Spec) { s.VolumeMode = "Block" }), []string{"volume_mode"}},
		{"another environment's claim", claim("uid-1", func(p *corev1.PersistentVolumeClaim) { p.Labels[EnvironmentLabel] = "west" }), asked,
			[]string{`environment "west" of this gateway`, "take_over"}},
		{"another installation's claim", claim("uid-1", func(p *corev1.PersistentVolumeClaim) { p.Labels[InstallationLabel] = "staging-db" }), asked,
			[]string{"another storage-gateway installation (staging-db)"}},
		{"a gateway's claim from before owners were named", claim("uid-1", unlabelled), asked, []string{"before claims named their owner"}},
		{"DCM's storage SP's claim", claim("uid-1", func(p *corev1.PersistentVolumeClaim) {
			unlabelled(p)
			delete(p.Annotations, displayNameAnnotation)
		}), asked, []string{"another provider", ":adopt"}},
		{"a hand-made claim", claim("uid-1", func(p *corev1.PersistentVolumeClaim) { p.Labels = nil }), asked, []string{"does not manage"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := claimRefusal(east, tt.rec, tt.claim)
			if tt.refused == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			fe, ok := fault.As(err)
			if !ok || fe.Kind != fault.AlreadyExists || fe.Field != "id" {
				t.Fatalf("got %v, want AlreadyExists naming the id", err)
			}
			for _, part := range tt.refused {
				if !strings.Contains(fe.Detail, part) {
					t.Errorf("detail %q does not mention %q", fe.Detail, part)
				}
			}
		})
	}
}

// TestAnAdoptionTakesOverOnlyWhenToldTo: a claim another environment or
// installation made, or a gateway made before claims named their owner,
// is skipped naming its holder unless the adoption takes over; the
// environment's own claim, and DCM's storage SP's, are taken either way.
func TestAnAdoptionTakesOverOnlyWhenToldTo(t *testing.T) {
	mine, west, staging, old, sp := labelled("dcm", "mine"), labelled("dcm", "west"), labelled("dcm", "staging"), labelled("dcm", "old"), labelled("dcm", "sp")
	mine.Labels[InstallationLabel], mine.Labels[EnvironmentLabel] = east.installation, "east"
	west.Labels[InstallationLabel], west.Labels[EnvironmentLabel] = east.installation, "west"
	staging.Labels[InstallationLabel], staging.Labels[EnvironmentLabel] = "staging", "east"
	old.Annotations = map[string]string{displayNameAnnotation: "Old"}
	unrecorded := []*corev1.PersistentVolumeClaim{mine, west, staging, old, sp}
	cluster := clusterstest.New(class("fast", true))
	for _, tt := range []struct {
		takeOver bool
		want     []string
	}{
		{false, []string{"mine", "sp"}},
		{true, []string{"mine", "west", "staging", "old", "sp"}},
	} {
		take, out := choose(cluster, east, tt.takeOver, unrecorded, map[string]string{}, Adoption{Skipped: []Skip{}, Warnings: []Skip{}})
		var taken []string
		for _, pvc := range take {
			taken = append(taken, pvc.Name)
		}
		if !slices.Equal(taken, tt.want) {
			t.Errorf("take over %v: took %v, want %v", tt.takeOver, taken, tt.want)
		}
		if tt.takeOver {
			if len(out.Skipped) != 0 {
				t.Errorf("take over: skipped %+v", out.Skipped)
			}
			continue
		}
		reasons := map[string]string{}
		for _, s := range out.Skipped {
			reasons[s.Name] = s.Reason
		}
		for name, want := range map[string]string{"west": `environment "west" of this gateway`,
			"staging": "another storage-gateway installation (staging)", "old": "before claims named their owner"} {
			if !strings.Contains(reasons[name], want) || !strings.Contains(reasons[name], "take_over") {
				t.Errorf("%s skipped because %q, want it to name %q and take_over", name, reasons[name], want)
			}
		}
	}
	// A volume of that id another environment of this gateway records is
	// never taken over.
	take, _ := choose(cluster, east, true, []*corev1.PersistentVolumeClaim{west}, map[string]string{"west": "west"}, Adoption{Skipped: []Skip{}, Warnings: []Skip{}})
	if len(take) != 0 {
		t.Errorf("took %v, another environment's record holds it", take)
	}
}

// TestUnadoptedCountsLeaveOthersClaimsOut: in a namespace two
// environments share, the other's claims are served there, not unadopted
// here.
func TestUnadoptedCountsLeaveOthersClaimsOut(t *testing.T) {
	mine, west, sp := labelled("dcm", "mine"), labelled("dcm", "west"), labelled("dcm", "sp")
	mine.Labels[InstallationLabel], mine.Labels[EnvironmentLabel] = east.installation, "east"
	west.Labels[InstallationLabel], west.Labels[EnvironmentLabel] = east.installation, "west"
	for pvc, want := range map[*corev1.PersistentVolumeClaim]bool{mine: true, west: false, sp: true} {
		if got := east.unserved(pvc); got != want {
			t.Errorf("%s unserved = %v, want %v", pvc.Name, got, want)
		}
	}
}

// TestACopyDefaultsToItsSource: a restore or clone that leaves its
// namespace, class or volume mode open gets its source's, not the
// environment's defaults (which its source's driver would mostly refuse);
// what the request names stays.
func TestACopyDefaultsToItsSource(t *testing.T) {
	from := record{ID: "db", Spec: Spec{Namespace: "team-a", StorageClass: "snapshots", VolumeMode: "Block"}}
	f := filling{src: &Source{Volume: "db"}, namespace: "team-a", from: from}
	got := f.defaults(Request{Name: "copy", Capacity: "1Gi", Hints: Hints{Source: f.src}}).Hints
	if got.Namespace != "team-a" || got.StorageClass != "snapshots" || got.VolumeMode != "Block" {
		t.Errorf("open hints became %+v, want the source's namespace, class and volume mode", got)
	}
	got = f.defaults(Request{Hints: Hints{StorageClass: "fast", Namespace: "dcm", VolumeMode: "Filesystem"}}).Hints
	if got.Namespace != "dcm" || got.StorageClass != "fast" || got.VolumeMode != "Filesystem" {
		t.Errorf("named hints became %+v, want them kept", got)
	}
	// A snapshot whose volume was forgotten gives its namespace only.
	got = filling{namespace: "team-a"}.defaults(Request{}).Hints
	if got.Namespace != "team-a" || got.StorageClass != "" || got.VolumeMode != "" {
		t.Errorf("a forgotten volume's snapshot gave %+v", got)
	}
}
