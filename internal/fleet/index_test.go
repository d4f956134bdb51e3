package fleet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/fleet"
	"github.com/dcm-project/storage-gateway/internal/fleet/fleettest"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// newIndex holds env-0..env-(n-1), regions alternating east/west, each with
// classes class-00..class-(classes-1).
func newIndex(t testing.TB, n, classes int) *fleet.Index {
	t.Helper()
	ix := fleet.NewIndex()
	var metas []fleet.Meta
	for i := range n {
		metas = append(metas, fleet.Meta{ID: fmt.Sprintf("env-%d", i), Region: []string{"east", "west"}[i%2]})
	}
	ix.SetEnvironments(metas)
	for _, m := range metas {
		if !ix.Observe(m.ID, fleettest.Objects(classes, 100), t0) {
			t.Fatalf("first observation of %s reported no change", m.ID)
		}
	}
	return ix
}

// listJSON runs a fleet query and decodes what the API would send.
func listJSON(t *testing.T, ix *fleet.Index, f fleet.Filter, size int, token string) (list struct {
	StorageClasses []struct {
		Name         string
		Summary      fleet.Summary
		Environments []fleet.Detail
	} `json:"storage_classes"`
	NextPageToken string `json:"next_page_token"`
}) {
	t.Helper()
	page, err := ix.Classes(f, size, token)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := page.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		t.Fatalf("decode %s: %v", buf.String(), err)
	}
	return list
}

func TestAggregatesByClassName(t *testing.T) {
	ix := newIndex(t, 3, 4)
	list := listJSON(t, ix, fleet.Filter{}, 0, "")
	var names []string
	for _, c := range list.StorageClasses {
		names = append(names, c.Name)
	}
	if want := []string{"class-00", "class-01", "class-02", "class-03"}; !slices.Equal(names, want) {
		t.Fatalf("names = %v, want %v", names, want)
	}
	c0 := list.StorageClasses[0]
	var envs []string
	for _, d := range c0.Environments {
		envs = append(envs, d.EnvironmentID)
		if d.Name != "class-00" || d.Stale || !d.ObservedTime.Equal(t0) {
			t.Errorf("detail %+v", d)
		}
		if _, leaked := d.Parameters["csi.storage.k8s.io/provisioner-secret-name"]; leaked {
			t.Errorf("secret-looking parameter shown in %s", d.EnvironmentID)
		}
	}
	if want := []string{"env-0", "env-1", "env-2"}; !slices.Equal(envs, want) {
		t.Fatalf("environments = %v, want %v", envs, want)
	}
	want := fleet.Summary{EnvironmentCount: 3, DefaultCount: 3, Provisioners: []string{"ebs.csi.aws.com"}, Expandable: "nowhere",
		AccessModes: []string{"ReadWriteOnce", "ReadWriteOncePod"}, VolumeModes: []string{"Filesystem", "Block"},
		Capacity: &fleet.Total{Total: "300Gi", TotalBytes: 300 << 30}}
	if got := c0.Summary; !reflect.DeepEqual(got, want) {
		t.Fatalf("summary = %+v, want %+v", got, want)
	}
	if s := list.StorageClasses[2].Summary; s.UnknownCapabilityCount != 3 || len(s.AccessModes) != 0 {
		t.Fatalf("class-02 (unknown driver) summary = %+v", s)
	}
}

func TestSummaryExpandableAndUnion(t *testing.T) {
	ix := fleet.NewIndex()
	ix.SetEnvironments([]fleet.Meta{{ID: "a"}, {ID: "b"}})
	a := fleettest.Objects(2, 1) // class-01: expandable, EFS
	b := fleettest.Objects(2, 1)
	b.Classes[1].AllowVolumeExpansion = new(false)
	b.Classes[1].Provisioner = "ebs.csi.aws.com"
	ix.Observe("a", a, t0)
	ix.Observe("b", b, t0)
	s := listJSON(t, ix, fleet.Filter{}, 0, "").StorageClasses[1].Summary
	if s.Expandable != "somewhere" || !slices.Equal(s.Provisioners, []string{"ebs.csi.aws.com", "efs.csi.aws.com"}) ||
		!slices.Equal(s.AccessModes, []string{"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}) {
		t.Fatalf("summary = %+v", s)
	}
}

func TestFilters(t *testing.T) {
	ix := newIndex(t, 4, 6)
	yes, no := true, false
	tests := []struct {
		name    string
		filter  fleet.Filter
		classes []string
		envs    int // environments per class
	}{
		{"environment", fleet.Filter{Environments: []string{"env-1", "env-3"}}, []string{"class-00", "class-01", "class-02", "class-03", "class-04", "class-05"}, 2},
		{"region", fleet.Filter{Region: "west"}, []string{"class-00", "class-01", "class-02", "class-03", "class-04", "class-05"}, 2},
		{"provisioner", fleet.Filter{Provisioner: "efs.csi.aws.com"}, []string{"class-01", "class-04"}, 4},
		{"access mode known only", fleet.Filter{AccessMode: "ReadWriteMany"}, []string{"class-01", "class-04"}, 4},
		{"volume mode", fleet.Filter{VolumeMode: "Block"}, []string{"class-00", "class-03"}, 4},
		{"expandable", fleet.Filter{Expandable: &yes}, []string{"class-01", "class-03", "class-05"}, 4},
		{"not expandable", fleet.Filter{Expandable: &no}, []string{"class-00", "class-02", "class-04"}, 4},
		{"default", fleet.Filter{IsDefault: &yes}, []string{"class-00"}, 4},
		{"combined", fleet.Filter{Region: "east", Expandable: &yes, Provisioner: "ebs.csi.aws.com"}, []string{"class-03"}, 2},
		{"nothing matches", fleet.Filter{Region: "mars"}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list := listJSON(t, ix, tt.filter, 0, "")
			var names []string
			for _, c := range list.StorageClasses {
				names = append(names, c.Name)
				if len(c.Environments) != tt.envs || c.Summary.EnvironmentCount != tt.envs {
					t.Errorf("%s: %d environments (summary %d), want %d", c.Name, len(c.Environments), c.Summary.EnvironmentCount, tt.envs)
				}
			}
			if !slices.Equal(names, tt.classes) {
				t.Fatalf("classes = %v, want %v", names, tt.classes)
			}
		})
	}
}

func TestBadFiltersAreRefused(t *testing.T) {
	ix := newIndex(t, 1, 1)
	for field, f := range map[string]fleet.Filter{
		"access_mode": {AccessMode: "ReadWriteSometimes"},
		"volume_mode": {VolumeMode: "Tape"},
	} {
		_, err := ix.Classes(f, 0, "")
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("filter %+v: %v, want an error naming %s", f, err, field)
		}
	}
	if _, err := ix.Classes(fleet.Filter{}, -1, ""); err == nil {
		t.Error("a negative page size was accepted")
	}
}

func TestPagesByClassName(t *testing.T) {
	ix := newIndex(t, 2, 5)
	var names []string
	token := ""
	for pages := 1; ; pages++ {
		list := listJSON(t, ix, fleet.Filter{Region: "east"}, 2, token)
		for _, c := range list.StorageClasses {
			names = append(names, c.Name)
		}
		if token = list.NextPageToken; token == "" {
			if pages != 3 {
				t.Fatalf("%d pages, want 3", pages)
			}
			break
		}
	}
	if want := []string{"class-00", "class-01", "class-02", "class-03", "class-04"}; !slices.Equal(names, want) {
		t.Fatalf("paged names = %v, want %v", names, want)
	}
	first := listJSON(t, ix, fleet.Filter{Region: "east"}, 2, "")
	_, err := ix.Classes(fleet.Filter{Region: "west"}, 2, first.NextPageToken)
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Field != "page_token" {
		t.Fatalf("a token replayed with other filters: %v, want an error naming page_token", err)
	}
}

func TestStaleKeepsLastKnownData(t *testing.T) {
	ix := newIndex(t, 2, 3)
	lost := t0.Add(time.Hour)
	ix.MarkStale("env-1", lost)
	got, ok := ix.Environment("env-1")
	if !ok || !got.Stale || !got.ObservedTime.Equal(lost) || len(got.Classes) != 3 {
		t.Fatalf("stale environment = %+v", got)
	}
	for _, d := range got.Classes {
		if !d.Stale || !d.ObservedTime.Equal(lost) {
			t.Fatalf("detail %s: stale %v at %v", d.Name, d.Stale, d.ObservedTime)
		}
	}
	s := listJSON(t, ix, fleet.Filter{}, 0, "").StorageClasses[0].Summary
	if s.EnvironmentCount != 2 || s.StaleEnvironmentCount != 1 {
		t.Fatalf("summary = %+v", s)
	}
	// Back live with the same data: fresh again, observed now — a change
	// to persist (other replicas show it live too); the same data again is
	// none.
	back := lost.Add(time.Minute)
	if !ix.Observe("env-1", fleettest.Objects(3, 100), back) {
		t.Error("live again not reported as a change to persist")
	}
	if ix.Observe("env-1", fleettest.Objects(3, 100), back.Add(time.Second)) {
		t.Error("unchanged classes reported as a change to persist")
	}
	if got, _ := ix.Environment("env-1"); got.Stale || !got.ObservedTime.Equal(back) {
		t.Fatalf("after reconnecting: %+v", got)
	}
}

func TestRestoreOnlyFillsEmptyEnvironments(t *testing.T) {
	ix := fleet.NewIndex()
	ix.SetEnvironments([]fleet.Meta{{ID: "dead"}, {ID: "live"}})
	ix.Observe("live", fleettest.Objects(1, 1), t0)
	old := t0.Add(-time.Hour)
	ix.Restore("dead", capabilities.Slim(fleettest.Objects(2, 1)), old)
	ix.Restore("live", capabilities.Slim(fleettest.Objects(5, 1)), old)
	ix.Restore("unregistered", capabilities.Slim(fleettest.Objects(5, 1)), old)
	if dead, _ := ix.Environment("dead"); !dead.Stale || !dead.ObservedTime.Equal(old) || len(dead.Classes) != 2 {
		t.Fatalf("restored environment = %+v", dead)
	}
	if live, _ := ix.Environment("live"); live.Stale || len(live.Classes) != 1 {
		t.Fatalf("restore overwrote live data: %+v", live)
	}
	if _, ok := ix.Environment("unregistered"); ok {
		t.Fatal("restore added an environment the registry does not hold")
	}
}

func TestEnvironmentSettingsApply(t *testing.T) {
	ix := newIndex(t, 1, 3)
	override := capabilities.Overrides{Provisioners: map[string]capabilities.Override{"disk.example.com": {AccessModes: []string{"ReadWriteMany"}}}}
	ix.SetEnvironments([]fleet.Meta{{ID: "env-0", Region: "north", Zone: "n1", Overrides: override}})
	got, _ := ix.Environment("env-0")
	c := got.Classes[2]
	if c.Region != "north" || c.Zone != "n1" || !slices.Equal(c.AccessModes, []string{"ReadWriteMany"}) ||
		c.CapabilitySource.AccessModes != capabilities.SourceEnvironment {
		t.Fatalf("after the override: %+v", c)
	}
	ix.SetEnvironments(nil)
	if _, ok := ix.Environment("env-0"); ok {
		t.Fatal("an environment no longer registered is still shown")
	}
	if list := listJSON(t, ix, fleet.Filter{}, 0, ""); len(list.StorageClasses) != 0 {
		t.Fatalf("fleet still lists %d classes", len(list.StorageClasses))
	}
}

func TestObserveIgnoresUnknownEnvironments(t *testing.T) {
	ix := fleet.NewIndex()
	if ix.Observe("ghost", fleettest.Objects(1, 1), t0) {
		t.Fatal("observing an unregistered environment reported a change")
	}
	if _, ok := ix.Environment("ghost"); ok {
		t.Fatal("an unregistered environment appeared")
	}
	if !strings.Contains(fmt.Sprint(ix.SetEnvironments([]fleet.Meta{{ID: "ghost"}})), "ghost") {
		t.Fatal("SetEnvironments did not report the new environment")
	}
}

// Class names come and go; queries keep answering with the names in use
// after the index forgets the others.
func TestClassNamesChurn(t *testing.T) {
	ix := fleet.NewIndex()
	metas := []fleet.Meta{{ID: "a"}}
	ix.SetEnvironments(metas)
	for round := range 20 {
		objs := fleettest.Objects(10, 1)
		for i, c := range objs.Classes {
			c.Name = fmt.Sprintf("round-%02d-%d", round, i)
		}
		objs.Capacities = nil
		ix.Observe("a", objs, t0)
		ix.SetEnvironments(metas)
	}
	list := listJSON(t, ix, fleet.Filter{}, 0, "")
	var names []string
	for _, c := range list.StorageClasses {
		names = append(names, c.Name)
		if len(c.Environments) != 1 || c.Environments[0].Name != c.Name {
			t.Fatalf("%s: %+v", c.Name, c.Environments)
		}
	}
	if len(names) != 10 || names[0] != "round-19-0" || names[9] != "round-19-9" {
		t.Fatalf("names after churn: %v", names)
	}
	if n := fleet.InternedNames(ix); n > 2*10+64 {
		t.Fatalf("%d class names still interned after 200 came and went, 10 in use", n)
	}
}
