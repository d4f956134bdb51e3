package volumes

import (
	"context"
	"slices"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/status"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// TestTheFleetListPagesThroughTheRecords: the fleet-wide list filters by
// environment, status and class, leaves DELETED volumes out unless asked
// for, pages in environment-then-id order across environments, refuses a
// page token reused with other filters and an unknown status, naming the
// field.
func TestTheFleetListPagesThroughTheRecords(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	for _, env := range []string{"east", "west"} {
		reg.InsertEnvironment(t, env)
	}
	insertVolumes(t, reg, []stored{
		{"west", "a", "RUNNING", "fast", "1Gi"}, {"east", "b", "RUNNING", "fast", "1Gi"},
		{"east", "a", "PROVISIONING", "slow", "1Gi"}, {"east", "c", "DELETED", "fast", "1Gi"},
		{"west", "b", "FAILED", "slow", "1Gi"},
	})
	s := &Service{repo: repository{db: reg.DB}}
	ids := func(q AllQuery) []string {
		t.Helper()
		var out []string
		for {
			page, err := s.ListAll(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range page.Volumes {
				out = append(out, v.EnvironmentID+"/"+v.ID)
			}
			if page.NextPageToken == "" {
				return out
			}
			q.PageToken = page.NextPageToken
		}
	}
	for _, tt := range []struct {
		name string
		q    AllQuery
		want []string
	}{
		{"everything live, a page at a time", AllQuery{MaxPageSize: 1}, []string{"east/a", "east/b", "west/a", "west/b"}},
		{"two per page", AllQuery{MaxPageSize: 2}, []string{"east/a", "east/b", "west/a", "west/b"}},
		{"one environment", AllQuery{Environments: []string{"west"}}, []string{"west/a", "west/b"}},
		{"a status", AllQuery{Status: status.Running}, []string{"east/b", "west/a"}},
		{"DELETED when asked", AllQuery{Status: status.Deleted}, []string{"east/c"}},
		{"a class", AllQuery{StorageClass: "slow", MaxPageSize: 1}, []string{"east/a", "west/b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ids(tt.q); !slices.Equal(got, tt.want) {
				t.Fatalf("listed %v, want %v", got, tt.want)
			}
		})
	}

	page, err := s.ListAll(context.Background(), AllQuery{MaxPageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListAll(context.Background(), AllQuery{MaxPageSize: 1, StorageClass: "slow", PageToken: page.NextPageToken}); !fault.Is(err, fault.InvalidArgument) {
		t.Errorf("a page token reused with another filter: %v, want a field problem", err)
	}
	if _, err := s.ListAll(context.Background(), AllQuery{Status: "LOST"}); err == nil {
		t.Error("an unknown status was accepted")
	} else if fe, _ := fault.As(err); fe == nil || fe.Field != "status" {
		t.Errorf("an unknown status: %v, want a problem naming status", err)
	}
}
