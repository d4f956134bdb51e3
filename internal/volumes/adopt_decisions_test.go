package volumes

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/clusters/clusterstest"
	"github.com/dcm-project/storage-gateway/internal/environments"
)

// TestHealthAsDCMPollsIt: healthy only while the last probe found the
// environment READY or DEGRADED and its connection answers; otherwise the
// message says which of them is not.
func TestHealthAsDCMPollsIt(t *testing.T) {
	ready := clusterstest.New()
	lost := clusterstest.New()
	lost.SetHealth(clusters.Health{State: clusters.HealthUnreachable, Message: "the API server did not answer"})
	probed := func(state environments.State, msg string) environments.Status {
		return environments.Status{State: state, Message: msg}
	}
	for _, tt := range []struct {
		name      string
		st        environments.Status
		cluster   clusters.Live
		connected bool
		healthy   bool
		message   string
	}{
		{"ready", probed(environments.StateReady, "3 classes"), ready, true, true, "READY: 3 classes"},
		{"degraded serves", probed(environments.StateDegraded, "credentials expire in 2 days"), ready, true, true, "DEGRADED: credentials expire in 2 days"},
		{"not connected", probed(environments.StateReady, "3 classes"), nil, false, false, "not connected"},
		{"probe refused", probed(environments.StateUnauthorized, "token rejected"), ready, true, false, "UNAUTHORIZED: token rejected"},
		{"not probed yet", probed(environments.StatePending, ""), ready, true, false, "PENDING"},
		{"connection lost since the probe", probed(environments.StateReady, "3 classes"), lost, true, false, "UNREACHABLE: the API server did not answer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			healthy, msg := healthOf(tt.st, tt.cluster, tt.connected)
			if healthy != tt.healthy || !strings.HasPrefix(msg, tt.message) {
				t.Fatalf("healthOf = %v %q, want %v %q", healthy, msg, tt.healthy, tt.message)
			}
		})
	}
}

// labelled is a claim DCM's storage provider (or the gateway) labelled as a
// storage instance named name.
func labelled(namespace, name string) *corev1.PersistentVolumeClaim {
	class := "fast"
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			clusters.ManagedByLabel: clusters.ManagedByValue, InstanceIDLabel: name, ServiceTypeLabel: ServiceType}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class},
	}
}

// TestAnAdoptionTakesOnlyWhatNoRecordServes: of the storage claims in the
// namespaces asked for, those the environment's records serve are
// counted, those it records otherwise (deleted, in another namespace) are
// skipped with the reason, and the rest go on; claims of other services
// or namespaces are not looked at.
func TestAnAdoptionTakesOnlyWhatNoRecordServes(t *testing.T) {
	other := labelled("dcm", "db-cache")
	other.Labels[ServiceTypeLabel] = "database"
	pvcs := []*corev1.PersistentVolumeClaim{
		labelled("dcm", "served"), labelled("dcm", "deleted"), labelled("dcm", "moved"),
		labelled("dcm", "new"), labelled("team-a", "new-a"), labelled("kube-system", "elsewhere"), other,
	}
	recorded := map[string]recordedAs{
		"served": {namespace: "dcm"}, "deleted": {namespace: "dcm", deleted: true}, "moved": {namespace: "team-a"},
	}
	unrecorded, out := triage(pvcs, []string{"dcm", "team-a"}, recorded)
	var names []string
	for _, pvc := range unrecorded {
		names = append(names, pvc.Namespace+"/"+pvc.Name)
	}
	if want := []string{"dcm/new", "team-a/new-a"}; !slices.Equal(names, want) {
		t.Errorf("unrecorded %v, want %v", names, want)
	}
	if out.Recorded != 1 {
		t.Errorf("%d counted as served, want 1", out.Recorded)
	}
	wantSkipped := map[string]string{"deleted": "recorded as deleted", "moved": "recorded in namespace team-a"}
	if len(out.Skipped) != len(wantSkipped) {
		t.Errorf("skipped %+v, want %v", out.Skipped, wantSkipped)
	}
	for _, s := range out.Skipped {
		if !strings.Contains(s.Reason, wantSkipped[s.Name]) || wantSkipped[s.Name] == "" {
			t.Errorf("%s skipped because %q, want %q", s.Name, s.Reason, wantSkipped[s.Name])
		}
	}
	if out.Adopted == nil || out.Warnings == nil || !slices.Equal(out.Namespaces, []string{"dcm", "team-a"}) {
		t.Errorf("an adoption's lists must be empty, not absent, and name its namespaces: %+v", out)
	}
}

// TestAnAdoptionChoosesWhatCanBeAVolume: of the unrecorded claims, one
// whose name is in several namespaces, is not its instance id or is a
// volume of another environment is skipped with the reason; one being
// deleted or whose class is gone is taken with a warning.
func TestAnAdoptionChoosesWhatCanBeAVolume(t *testing.T) {
	deleting := labelled("dcm", "deleting")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	classless := labelled("dcm", "classless")
	gone := "bronze"
	classless.Spec.StorageClassName = &gone
	mislabelled := labelled("dcm", "renamed")
	mislabelled.Labels[InstanceIDLabel] = "original"
	unrecorded := []*corev1.PersistentVolumeClaim{
		labelled("dcm", "fine"), labelled("dcm", "twice"), labelled("team-a", "twice"), mislabelled,
		labelled("dcm", "west-volume"), deleting, classless,
	}
	cluster := clusterstest.New(class("fast", true))
	take, out := choose(cluster, east, false, unrecorded, map[string]string{"west-volume": "west"}, Adoption{Skipped: []Skip{}, Warnings: []Skip{}})
	var taken []string
	for _, pvc := range take {
		taken = append(taken, pvc.Name)
	}
	if want := []string{"fine", "deleting", "classless"}; !slices.Equal(taken, want) {
		t.Errorf("took %v, want %v", taken, want)
	}
	reasons := func(list []Skip) map[string]string {
		m := map[string]string{}
		for _, s := range list {
			m[s.Namespace+"/"+s.Name] = s.Reason
		}
		return m
	}
	for key, want := range map[string]string{
		"dcm/twice": "several of the environment's namespaces", "team-a/twice": "several of the environment's namespaces",
		"dcm/renamed": `is "original", not its name`, "dcm/west-volume": "recorded in environment west",
	} {
		if got := reasons(out.Skipped)[key]; !strings.Contains(got, want) {
			t.Errorf("%s skipped because %q, want %q", key, got, want)
		}
	}
	if len(out.Skipped) != 4 {
		t.Errorf("skipped %+v, want 4", out.Skipped)
	}
	warned := reasons(out.Warnings)
	if !strings.Contains(warned["dcm/deleting"], "being deleted") || !strings.Contains(warned["dcm/classless"], "bronze does not exist") || len(warned) != 2 {
		t.Errorf("warnings %v, want one for the claim being deleted and one for the class gone", warned)
	}
}
