package membership_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// fleet is a migrated database with n registered environments.
func fleet(t *testing.T, n int) (*registrytest.Fixture, []string) {
	t.Helper()
	reg := registrytest.New(t, registrytest.Options{})
	var envs []string
	for i := range n {
		id := fmt.Sprintf("env-%02d", i)
		reg.InsertEnvironment(t, id)
		envs = append(envs, id)
	}
	return reg, envs
}

func member(reg *registrytest.Fixture, id string, lease time.Duration) *membership.Membership {
	return membership.New(membership.Options{DB: reg.DB, ID: id, AdvertiseURL: "http://" + id + ":8080", Lease: lease, Logger: slog.New(slog.DiscardHandler)})
}

// leaseRanOut waits until member id's last heartbeat is older than lease by
// the database's clock: the others count it dead from then on.
func leaseRanOut(t *testing.T, reg *registrytest.Fixture, id string, lease time.Duration) {
	t.Helper()
	poll.Until(t, 2*lease+time.Second, id+"'s lease ran out", func() bool {
		var dead bool
		err := reg.DB.QueryRow(context.Background(), `SELECT heartbeat_time < now() - make_interval(secs => $2) FROM members WHERE id = $1`,
			id, lease.Seconds()).Scan(&dead)
		return err == nil && dead
	})
}

// beat runs one heartbeat of each member, in order.
func beat(t *testing.T, members ...*membership.Membership) {
	t.Helper()
	for _, m := range members {
		if err := m.Beat(context.Background()); err != nil {
			t.Fatalf("%s: %v", m.ID(), err)
		}
	}
}

// owners reads environment_owners: member and epoch per environment.
func owners(t *testing.T, reg *registrytest.Fixture) (map[string]string, map[string]int64) {
	t.Helper()
	rows, err := reg.DB.Query(context.Background(), `SELECT environment_id, coalesce(member_id, ''), epoch FROM environment_owners`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	who, epochs := map[string]string{}, map[string]int64{}
	for rows.Next() {
		var env, m string
		var epoch int64
		if err := rows.Scan(&env, &m, &epoch); err != nil {
			t.Fatal(err)
		}
		who[env], epochs[env] = m, epoch
	}
	return who, epochs
}

// converged checks every environment has exactly the owner Assign gives it
// among members, and each member's view is the database's.
func converged(t *testing.T, reg *registrytest.Fixture, envs []string, members ...*membership.Membership) map[string]int64 {
	t.Helper()
	var ids []string
	for _, m := range members {
		ids = append(ids, m.ID())
	}
	want := membership.Assign(envs, ids, nil)
	who, epochs := owners(t, reg)
	if !maps.Equal(who, want) {
		t.Fatalf("owners %v, want %v", who, want)
	}
	for _, m := range members {
		for env, epoch := range m.Owned() {
			if who[env] != m.ID() || epochs[env] != epoch {
				t.Errorf("%s believes it owns %s at epoch %d; the database says %s at %d", m.ID(), env, epoch, who[env], epochs[env])
			}
		}
		n := 0
		for _, owner := range who {
			if owner == m.ID() {
				n++
			}
		}
		if len(m.Owned()) != n {
			t.Errorf("%s believes it owns %d environments, the database says %d", m.ID(), len(m.Owned()), n)
		}
	}
	return epochs
}

// Three members joining one after another end with every environment owned
// once, as Assign says, after two rounds of heartbeats: a live owner is
// never displaced, it releases what is assigned elsewhere and the other
// claims it.
func TestMembersShareEnvironmentsOnce(t *testing.T) {
	reg, envs := fleet(t, 30)
	a, b, c := member(reg, "a", time.Minute), member(reg, "b", time.Minute), member(reg, "c", time.Minute)
	beat(t, a)
	converged(t, reg, envs, a)
	beat(t, b, c) // b and c claim nothing a holds
	if who, _ := owners(t, reg); len(b.Owned())+len(c.Owned()) != 0 || len(who) != 30 {
		t.Fatalf("b and c took environments from a live owner: b %d, c %d", len(b.Owned()), len(c.Owned()))
	}
	beat(t, a, b, c) // a releases, b and c claim
	epochs := converged(t, reg, envs, a, b, c)
	for env, epoch := range epochs {
		if epoch != 1 && epoch != 2 {
			t.Errorf("%s at epoch %d after one hand-over at most", env, epoch)
		}
	}
}

// A member that stops heartbeating is dead once its lease runs out: the
// others claim its environments with a higher epoch, so whatever it writes
// with its old epochs is fenced off. Back, it rejoins and gets its share
// again, each at a new epoch.
func TestDeadMembersEnvironmentsAreClaimedAtANewEpoch(t *testing.T) {
	reg, envs := fleet(t, 20)
	lease := time.Second
	a, b := member(reg, "a", lease), member(reg, "b", lease)
	beat(t, a, b, a, b)
	before := converged(t, reg, envs, a, b)
	stalled := b.Owned()
	if len(stalled) == 0 {
		t.Fatal("b owns nothing")
	}
	leaseRanOut(t, reg, "b", lease)
	beat(t, a)
	who, epochs := owners(t, reg)
	for env, epoch := range stalled {
		if who[env] != "a" || epochs[env] <= epoch {
			t.Errorf("%s: owner %s at epoch %d, want a above b's %d", env, who[env], epochs[env], epoch)
		}
	}
	beat(t, b, a, b)
	after := converged(t, reg, envs, a, b)
	for env := range stalled {
		if after[env] != before[env]+2 {
			t.Errorf("%s: epoch %d, want %d (taken by a, claimed back by b)", env, after[env], before[env]+2)
		}
	}
}

// A replica restarted with the same member id replaces its previous
// incarnation at once and claims its environments again at new epochs; the
// previous incarnation, if it still runs, owns nothing from then on.
func TestRestartedMemberReplacesItsPreviousIncarnation(t *testing.T) {
	reg, envs := fleet(t, 10)
	old := member(reg, "a", time.Minute)
	beat(t, old)
	before := converged(t, reg, envs, old)
	restarted := member(reg, "a", time.Minute)
	beat(t, restarted, old)
	after := converged(t, reg, envs, restarted)
	if len(old.Owned()) != 0 {
		t.Errorf("the previous incarnation still believes it owns %d environments", len(old.Owned()))
	}
	for env, epoch := range after {
		if epoch != before[env]+1 {
			t.Errorf("%s at epoch %d, want %d", env, epoch, before[env]+1)
		}
	}
	beat(t, old) // still displaced: the restarted one is live
	if len(old.Owned()) != 0 {
		t.Error("the previous incarnation took its id back from a live one")
	}
	// The replaced process is told to stop and is no longer ready; the one
	// that took its place is.
	select {
	case <-old.Displaced():
	default:
		t.Fatal("the replaced process was not told to stop")
	}
	if err := old.Joined(t.Context()); err == nil || !strings.Contains(err.Error(), "SG_MEMBER_ID") {
		t.Errorf("the replaced process's readiness: %v, want an error naming SG_MEMBER_ID", err)
	}
	if err := restarted.Joined(t.Context()); err != nil {
		t.Errorf("the restarted process's readiness: %v", err)
	}
	select {
	case <-restarted.Displaced():
		t.Fatal("the process that took the id was told to stop")
	default:
	}
}

// A heartbeat woken right after a renewal writes none, but a process whose
// member id was taken meanwhile learns it before it claims anything: it
// takes nothing from the process that replaced it.
func TestAWokenHeartbeatOfAReplacedProcessClaimsNothing(t *testing.T) {
	reg, envs := fleet(t, 6)
	old := member(reg, "a", time.Minute)
	beat(t, old)
	converged(t, reg, envs, old)
	restarted := member(reg, "a", time.Minute)
	beat(t, restarted)
	after := converged(t, reg, envs, restarted)
	if err := old.WokenBeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(old.Owned()); n != 0 {
		t.Errorf("the replaced process believes it owns %d environments", n)
	}
	select {
	case <-old.Displaced():
	default:
		t.Error("the replaced process was not told to stop")
	}
	if got := converged(t, reg, envs, restarted); !maps.Equal(got, after) {
		t.Errorf("owners moved after the replaced process's heartbeat: %v, want %v", got, after)
	}
}

// A member that leaves hands over at once: the others claim its
// environments at their next heartbeat, not after the lease.
func TestLeavingMemberHandsOverAtOnce(t *testing.T) {
	reg, envs := fleet(t, 12)
	a, b := member(reg, "a", time.Minute), member(reg, "b", time.Minute)
	beat(t, a, b, a, b)
	converged(t, reg, envs, a, b)
	if err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	beat(t, a)
	converged(t, reg, envs, a)
}

// An environment labelled with membership.PinLabel is owned by that member once it is
// live, taken from whoever held it.
func TestPinnedEnvironmentGoesToItsMember(t *testing.T) {
	reg, envs := fleet(t, 8)
	a, b := member(reg, "a", time.Minute), member(reg, "b", time.Minute)
	beat(t, a)
	if _, err := reg.DB.Exec(context.Background(), `UPDATE environments SET labels = jsonb_build_object($1::text, 'b')`, membership.PinLabel); err != nil {
		t.Fatal(err)
	}
	beat(t, b, a, b)
	who, _ := owners(t, reg)
	for _, env := range envs {
		if who[env] != "b" {
			t.Errorf("%s, pinned to b, is owned by %q", env, who[env])
		}
	}
	if len(a.Owned()) != 0 || len(b.Owned()) != len(envs) {
		t.Errorf("a believes it owns %d, b %d", len(a.Owned()), len(b.Owned()))
	}
}

// A subscriber hears of every environment its member gains or loses, and
// Lease answers for exactly the environments the member owns: for the
// others an error a request answers 503 with Retry-After (a heartbeat).
func TestSubscribersHearOfGainsAndLosses(t *testing.T) {
	reg, envs := fleet(t, 12)
	a, b := member(reg, "a", 20*time.Second), member(reg, "b", 20*time.Second)
	sub := a.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sub.Run(ctx, func(_ context.Context, c membership.Change) { heard <- c.EnvironmentID })
	}()
	defer func() { cancel(); <-done }()
	collect := func(n int) map[string]bool {
		t.Helper()
		got := map[string]bool{}
		for len(got) < n {
			select {
			case env := <-heard:
				got[env] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("heard of %d environments, want %d", len(got), n)
			}
		}
		return got
	}

	beat(t, a)
	if got := collect(len(envs)); len(got) != len(envs) {
		t.Fatalf("gained %v", got)
	}
	beat(t, b, a, b) // a releases b's share
	lost := map[string]bool{}
	for _, env := range envs {
		_, err := a.Lease(env)
		if a.Owns(env) != (err == nil) {
			t.Fatalf("%s: Owns %v but Lease says %v", env, a.Owns(env), err)
		}
		if err != nil {
			lost[env] = true
			var fe *fault.Error
			if !errors.Is(err, membership.ErrNotOwner) || !errors.As(err, &fe) || fe.Kind != fault.Unavailable || fe.RetryAfter != a.Interval() {
				t.Fatalf("Lease of %s owned elsewhere: %v", env, err)
			}
		}
	}
	if len(lost) == 0 || len(lost) == len(envs) {
		t.Fatalf("a lost %d of %d environments to b", len(lost), len(envs))
	}
	if got := collect(len(lost)); !maps.Equal(got, lost) {
		t.Fatalf("heard of %v, lost %v", got, lost)
	}
}

// The fence: a write carrying a claim holds the owner row until it commits,
// so a claim by another member waits for it; once the other member claimed
// the environment, the stalled former owner's claim no longer passes.
func TestTheFenceRefusesAStalledOwner(t *testing.T) {
	reg, _ := fleet(t, 1)
	ctx := context.Background()
	lease := 4 * time.Second // a heartbeat's statements are bounded by half of it
	a, b := member(reg, "a", lease), member(reg, "b", lease)
	beat(t, a)
	held, err := a.Lease("env-00")
	if err != nil {
		t.Fatal(err)
	}
	fenced := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) bool {
		t.Helper()
		var ok bool
		if err := q.QueryRow(ctx, `SELECT `+membership.FenceSQL("$1", "$2", "$3"), "env-00", held.Epoch, held.Incarnation).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	tx, err := reg.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if !fenced(tx) {
		t.Fatal("the owner's claim does not pass its own fence")
	}
	// a stalls past its lease with its write open; b claims.
	leaseRanOut(t, reg, "a", lease)
	claimed := make(chan error, 1)
	go func() { claimed <- b.Beat(ctx) }()
	select {
	case err := <-claimed:
		t.Fatalf("b claimed while a's write held the fence (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	if !b.Owns("env-00") {
		t.Fatal("b did not claim the dead member's environment")
	}
	if fenced(reg.DB) {
		t.Fatal("the stalled owner's claim still passes the fence")
	}
}

// A member whose heartbeats stop being accepted (frozen, cut off from the
// database) stops owning by its own clock a heartbeat before the others may
// claim: it never believes it owns what another may have taken. An
// accepted heartbeat gives back what is still its.
func TestClaimsLapseOnTheMembersOwnClock(t *testing.T) {
	reg, envs := fleet(t, 3)
	lease := 2 * time.Second
	a := member(reg, "a", lease)
	beat(t, a)
	if !a.Owns(envs[0]) {
		t.Fatal("a does not own what it claimed")
	}
	beaten := time.Now()
	held := lease - a.Interval() // a heartbeat interval before its lease runs out
	poll.Until(t, held+200*time.Millisecond, "a's claims lapsed a heartbeat interval before its lease ran out",
		func() bool { return !a.Owns(envs[0]) })
	if lapsed := time.Since(beaten); lapsed < held-100*time.Millisecond {
		t.Fatalf("a's claims lapsed %s after its heartbeat, before the %s they hold", lapsed, held)
	}
	if _, err := a.Lease(envs[0]); !errors.Is(err, membership.ErrNotOwner) {
		t.Fatalf("a lapsed claim answers %v", err)
	}
	beat(t, a)
	if _, err := a.Lease(envs[0]); err != nil {
		t.Fatalf("after an accepted heartbeat: %v", err)
	}
}

// An idle heartbeat does not read every environment's owner: nothing that
// moves ownership happened (no member joined or left, no registry change,
// no hand-over owed). An owner row changed behind the members' backs is
// followed once a lease passed since the last read, or at once when the
// heartbeat is woken.
func TestAnIdleHeartbeatReadsOnlyTheMembers(t *testing.T) {
	reg, envs := fleet(t, 4)
	lease := 2 * time.Second
	a := member(reg, "a", lease)
	beat(t, a)
	epoch := converged(t, reg, envs, a)[envs[0]]
	read := time.Now()
	// Nobody announces this: the row moves to another epoch.
	if _, err := reg.DB.Exec(context.Background(), `UPDATE environment_owners SET epoch = epoch + 10 WHERE environment_id = $1`, envs[0]); err != nil {
		t.Fatal(err)
	}
	beat(t, a)
	if time.Since(read) >= lease {
		t.Skip("the machine took a lease for two heartbeats")
	}
	if got := a.Owned()[envs[0]]; got != epoch {
		t.Fatalf("an idle heartbeat read the owners: a holds %s at epoch %d, want the %d it read before", envs[0], got, epoch)
	}
	poll.Until(t, 2*lease, "a's heartbeat read the owners again within a lease", func() bool {
		beat(t, a)
		return a.Owned()[envs[0]] == epoch+10
	})
}

// A member that leaves tells the others over NATS: they own its
// environments at once, not at their next heartbeat.
func TestTheOthersTakeOverAsSoonAsAMemberLeaves(t *testing.T) {
	reg, envs := fleet(t, 20)
	server := natstest.Start(t)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(server.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	lease := 20 * time.Second // a heartbeat every 4 s
	join := func(id string) *membership.Membership {
		return membership.New(membership.Options{DB: reg.DB, ID: id, AdvertiseURL: "http://" + id + ":8080", Lease: lease,
			Departures: connect(), Logger: slog.New(slog.DiscardHandler)})
	}
	a, b := join("a"), join("b")
	beat(t, a, b, a, b)
	converged(t, reg, envs, a, b)
	heartbeat := func() (at time.Time) {
		if err := reg.DB.QueryRow(context.Background(), `SELECT heartbeat_time FROM members WHERE id = 'a'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := heartbeat()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Run's first heartbeat (its subscription is made before it); the next
	// is an interval away.
	poll.Until(t, 5*time.Second, "a's first heartbeat of Run", func() bool { return heartbeat().After(before) })
	left := time.Now()
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, a.Interval()/2, "a owns every environment", func() bool { return len(a.Owned()) == len(envs) })
	t.Logf("a owned b's environments %s after b left (heartbeat interval %s)", time.Since(left).Round(time.Millisecond), a.Interval())
}

// Environments whose owner restarted are claimed again by whoever the
// assignment over the new members names, not only by the owner's new
// incarnation: here a and c owned everything, then all three replicas
// started (a and c in new incarnations), and b's share, still held by the
// old a and c, must reach b. A whole deployment stopped at once ends like
// this: each replica's hand-over on leaving can go to one leaving too.
func TestEnvironmentsOfARestartedOwnerGoWhereTheyAreAssigned(t *testing.T) {
	reg, envs := fleet(t, 30)
	a, c := member(reg, "a", time.Minute), member(reg, "c", time.Minute)
	beat(t, a, c, a, c)
	converged(t, reg, envs, a, c)
	a2, b2, c2 := member(reg, "a", time.Minute), member(reg, "b", time.Minute), member(reg, "c", time.Minute)
	beat(t, a2, b2, c2, a2, b2, c2)
	converged(t, reg, envs, a2, b2, c2)
}

// Replicas restarted together after all died, a fraction of a heartbeat
// apart, as an orchestrator replacing a deployment's pods starts them, see
// each other before any claims: every environment is claimed once after the restart,
// by the member the assignment over all three names, and never handed
// over (its epoch one above what it was), within a few heartbeats of the
// last start.
func TestReplicasRestartedTogetherClaimEachEnvironmentOnce(t *testing.T) {
	reg, envs := fleet(t, 30)
	lease := time.Second // a heartbeat every 200 ms
	a, b, c := member(reg, "a", lease), member(reg, "b", lease), member(reg, "c", lease)
	beat(t, a, b, c, a, b, c)
	before := converged(t, reg, envs, a, b, c)
	for _, id := range []string{"a", "b", "c"} { // all three died (crashed, or stopped while handing over to each other)
		leaseRanOut(t, reg, id, lease)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }()
	var members []*membership.Membership
	for _, id := range []string{"a", "b", "c"} {
		m := member(reg, id, lease)
		members = append(members, m)
		running.Go(func() { m.Run(ctx) })
		time.Sleep(m.Interval() / 2)
	}
	lastStarted := time.Now()
	poll.Until(t, 2*lease, "every environment owned, and each member knows", func() bool {
		known := 0
		for _, m := range members {
			known += len(m.Owned())
		}
		who, _ := owners(t, reg)
		return len(who) == len(envs) && known == len(envs)
	})
	epochs := converged(t, reg, envs, members...)
	t.Logf("every environment owned %s after the last start (heartbeat interval %s)", time.Since(lastStarted).Round(time.Millisecond),
		members[0].Interval())
	for env, epoch := range epochs {
		if epoch != before[env]+1 {
			t.Errorf("%s went from epoch %d to %d: claimed by one member, then handed to another", env, before[env], epoch)
		}
	}
}

// A lone replica, restarted, claims its environments at its first
// heartbeat: nobody else owned any, so nobody else is expected.
func TestALoneReplicaClaimsAtOnce(t *testing.T) {
	reg, envs := fleet(t, 5)
	lease := 20 * time.Second // a heartbeat every 4 s: a wait for the next one would show
	beat(t, member(reg, "a", lease))
	restarted := member(reg, "a", lease)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); restarted.Run(ctx) }()
	defer func() { cancel(); <-done }()
	poll.Until(t, restarted.Interval()/2, "the restarted replica owns every environment", func() bool {
		return len(restarted.Owned()) == len(envs)
	})
}

// Every registration wakes every member. A member reads every environment's
// owner at once for the first wake-up after a quiet gap, and once per gap
// for the rest of a burst, never once per registration; the wake-ups add
// no heartbeat writes. Every environment of the burst is owned soon after.
func TestABurstOfRegistrationsIsReadOncePerGap(t *testing.T) {
	reg, _ := fleet(t, 2)
	var reads, renewals atomic.Int32
	db := tracedPool(t, reg, func(sql string) {
		switch {
		case strings.Contains(sql, "LEFT JOIN environment_owners"):
			reads.Add(1)
		case strings.Contains(sql, "INSERT INTO members"):
			renewals.Add(1)
		}
	})
	lease := 20 * time.Second // ticks 4 s apart: the burst is served by wake-ups
	a := membership.New(membership.Options{DB: db, ID: "a", AdvertiseURL: "http://a:8080", Lease: lease, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	poll.Until(t, lease, "a owns the fleet", func() bool { return len(a.Owned()) == 2 }) // once its join settled

	// A lone registration after a quiet gap is owned at once.
	time.Sleep(membership.WokenGap)
	reg.InsertEnvironment(t, "lone")
	a.Rebalance()
	poll.Until(t, membership.WokenGap/2, "a owns the lone registration", func() bool { _, ok := a.Owned()["lone"]; return ok })

	readsBefore, renewalsBefore := reads.Load(), renewals.Load()
	start := time.Now()
	var burst []string
	for time.Since(start) < 4*membership.WokenGap {
		id := fmt.Sprintf("burst-%03d", len(burst))
		reg.InsertEnvironment(t, id)
		a.Rebalance()
		burst = append(burst, id)
	}
	poll.Until(t, 2*membership.WokenGap, "a owns the whole burst", func() bool {
		owned := a.Owned()
		for _, id := range burst {
			if _, ok := owned[id]; !ok {
				return false
			}
		}
		return true
	})
	elapsed := time.Since(start)
	read, renewed := reads.Load()-readsBefore, renewals.Load()-renewalsBefore
	t.Logf("%d registrations in %s: %d reads of every owner, %d heartbeat writes", len(burst), elapsed.Round(time.Millisecond), read, renewed)
	if limit := int32(elapsed/membership.WokenGap) + 2; read > limit {
		t.Fatalf("%d reads of every owner for %d registrations in %s; want at most %d (one per %s)", read, len(burst), elapsed, limit, membership.WokenGap)
	}
	if len(burst) < 4*int(read) {
		t.Fatalf("only %d registrations for %d reads: the burst is too slow to tell", len(burst), read)
	}
	if limit := int32(elapsed/a.Interval()) + 1; renewed > limit {
		t.Fatalf("%d heartbeat writes in %s; want at most %d (one per %s)", renewed, elapsed, limit, a.Interval())
	}
}

// tracedPool is a second pool on reg's database that tells seen the text of
// every statement it runs.
func tracedPool(t *testing.T, reg *registrytest.Fixture, seen func(sql string)) *pgxpool.Pool {
	t.Helper()
	cfg := reg.DB.Config()
	cfg.ConnConfig.Tracer = statementTracer(seen)
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

type statementTracer func(sql string)

func (s statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s(data.SQL)
	return ctx
}

func (statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
