package auth_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

func TestAuditEventsAreStoredListedAndPruned(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	log := auth.NewAuditLog(auth.AuditOptions{DB: reg.DB, Logger: reg.Logger, Retention: 48 * time.Hour})
	ctx := context.Background()
	for i := range 5 {
		if err := log.Record(ctx, auth.AuditEvent{RequestID: fmt.Sprint("req-", i), Subject: "alice", Name: "Alice",
			Roles: []auth.Role{auth.RoleAdmin}, AuthMethod: auth.MethodOIDC, Action: "updateEnvironment",
			EnvironmentID: []string{"east", "west"}[i%2], Status: 200, Peer: "10.0.0.1:4000"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Record(ctx, auth.AuditEvent{Subject: "dcm-trusted-network", Roles: []auth.Role{auth.RoleDCM}, AuthMethod: auth.MethodTrustedNetwork,
		Action: "createVolume", EnvironmentID: "east", VolumeID: "v1", Status: 201, Peer: "10.0.0.2:4000"}); err != nil {
		t.Fatal(err)
	}

	page, err := log.List(ctx, auth.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 6 || page.Events[0].Action != "createVolume" || page.Events[0].VolumeID != "v1" || page.Events[5].RequestID != "req-0" {
		t.Fatalf("newest first: %+v", page.Events)
	}
	first := page.Events[1]
	if first.Subject != "alice" || first.Name != "Alice" || first.AuthMethod != auth.MethodOIDC || first.Status != 200 ||
		fmt.Sprint(first.Roles) != "[admin]" || first.Peer != "10.0.0.1:4000" || first.Time.IsZero() {
		t.Fatalf("event %+v", first)
	}
	count := func(q auth.AuditQuery) int {
		t.Helper()
		p, err := log.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Events)
	}
	future := time.Now().Add(time.Hour)
	for name, tc := range map[string]struct {
		q    auth.AuditQuery
		want int
	}{
		"subject":            {auth.AuditQuery{Subject: "alice"}, 5},
		"action":             {auth.AuditQuery{Action: "createVolume"}, 1},
		"environment":        {auth.AuditQuery{Environments: []string{"west"}}, 2},
		"out of scope":       {auth.AuditQuery{Environments: []string{}}, 0},
		"after now":          {auth.AuditQuery{Since: &future}, 0},
		"before the future":  {auth.AuditQuery{Until: &future}, 6},
		"subject and action": {auth.AuditQuery{Subject: "alice", Action: "createVolume"}, 0},
	} {
		if got := count(tc.q); got != tc.want {
			t.Errorf("%s: %d events, want %d", name, got, tc.want)
		}
	}

	// Pages of two, bound to their query.
	var ids []int64
	q := auth.AuditQuery{MaxPageSize: 2}
	for {
		p, err := log.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			ids = append(ids, e.ID)
		}
		if p.NextPageToken == "" {
			break
		}
		q.PageToken = p.NextPageToken
		if _, err := log.List(ctx, auth.AuditQuery{Subject: "alice", PageToken: p.NextPageToken}); err == nil {
			t.Fatal("a page token was accepted for another query")
		}
	}
	if len(ids) != 6 || ids[0] <= ids[5] {
		t.Fatalf("paged ids %v", ids)
	}

	// Events older than the retention are pruned.
	if _, err := reg.DB.Exec(ctx, `UPDATE audit_events SET time = now() - interval '3 days' WHERE subject = 'alice'`); err != nil {
		t.Fatal(err)
	}
	n, err := log.Prune(ctx)
	if err != nil || n != 5 {
		t.Fatalf("pruned %d, %v; want 5", n, err)
	}
	if got := count(auth.AuditQuery{}); got != 1 {
		t.Fatalf("%d events left, want the recent one", got)
	}
}

// Requests audited at once are stored together; each is answered only once
// its event is stored, an event the database refuses costs no other its
// record, and its own Record says it was not stored.
func TestConcurrentAuditEventsAreAllStored(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	log := auth.NewAuditLog(auth.AuditOptions{DB: reg.DB, Logger: logger, Retention: 48 * time.Hour})
	ctx := context.Background()
	const requests = 64
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			subject := "alice"
			if i == requests/2 {
				subject = "nul\x00byte" // Postgres refuses text with a NUL
			}
			err := log.Record(ctx, auth.AuditEvent{RequestID: fmt.Sprint("req-", i), Subject: subject, AuthMethod: auth.MethodStatic,
				Action: "createVolume", Status: 201})
			if (err == nil) != (subject == "alice") {
				t.Errorf("req-%d by %q: Record says %v", i, subject, err)
			}
			// Answered only once stored: the event is there now.
			if subject == "alice" {
				var n int
				if err := reg.DB.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE request_id = $1`, fmt.Sprint("req-", i)).Scan(&n); err != nil || n != 1 {
					t.Errorf("req-%d: %d rows after Record returned (%v)", i, n, err)
				}
			}
		})
	}
	wg.Wait()
	var stored int
	if err := reg.DB.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&stored); err != nil || stored != requests-1 {
		t.Fatalf("%d events stored, want %d (%v)", stored, requests-1, err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logs.String(), "audit event not stored"); n != 1 {
		t.Fatalf("%d events reported lost, want the refused one only:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Records that arrive while one is being stored wait for it and are then
// stored together, in one transaction: under load the audit log costs the
// database one commit per batch, not one per request. A transaction's rows
// share its now(), so the stored times count the transactions.
func TestAuditEventsArrivingTogetherShareACommit(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	log := auth.NewAuditLog(auth.AuditOptions{DB: reg.DB, Logger: reg.Logger, Retention: 48 * time.Hour})
	ctx := context.Background()
	// Hold the table, so the first writer's insert waits and the others
	// queue behind it.
	lock, err := reg.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE audit_events IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	const requests = 20
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			if err := log.Record(ctx, auth.AuditEvent{RequestID: fmt.Sprint("req-", i), Subject: "alice", AuthMethod: auth.MethodStatic,
				Action: "createVolume", Status: 201}); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // every request has reached the log
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var stored, commits int
	if err := reg.DB.QueryRow(ctx, `SELECT count(*), count(DISTINCT time) FROM audit_events`).Scan(&stored, &commits); err != nil {
		t.Fatal(err)
	}
	if stored != requests || commits > 2 {
		t.Fatalf("%d records in %d transactions; want %d in 2 (the first writer's, then everything that waited)", stored, commits, requests)
	}
}
