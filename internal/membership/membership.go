// Package membership owns which replica is responsible for which
// environment, in Postgres only: no Kubernetes leases, no other
// infrastructure, and nothing that breaks behind a transaction-pooling
// PgBouncer (no session advisory locks).
//
// Each replica is a member: a row (members) it heartbeats every fifth of
// the lease with the database's clock, never its own, and live while that
// heartbeat is younger than the lease. Every member computes the same
// assignment of environments to live members (Assign: rendezvous hashing
// with bounded loads) and claims what it is assigned: an environment that
// has no owner, or whose owner is no longer live, by compare-and-set on its
// environment_owners row, which raises the row's epoch. A member hands what
// is assigned elsewhere straight to its assignee (raising the epoch), so a
// live owner is never displaced, an environment's row always names one
// owner, and the assignee owns it from its next heartbeat. A starting
// member that finds environments owned under other members' ids claims
// nothing until the live members hold still (settleJoin), so replicas
// restarted together do not hand the fleet around. The epoch is
// the fence: a
// write made on behalf of an owner carries the epoch it claimed, and a
// stalled former owner's write finds a later one.
//
// The rest of the runtime follows ownership through Subscribe (a notice per
// environment gained or lost) and Lease (the fence a write carries): the
// pool connects owned environments only, and the probes and the DCM
// registrar act on owned environments only.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/dcm-project/storage-gateway/internal/changes"
)

// Options configure a Membership.
type Options struct {
	DB *pgxpool.Pool
	// ID names the member; stable across restarts where it can be (the
	// host name), so a restarted replica takes its own place at once.
	ID string
	// AdvertiseURL is where other replicas reach this one.
	AdvertiseURL string
	// Lease is how long a member stays live without a heartbeat.
	Lease time.Duration
	// Departures, if set, carries the notice a member sends when it
	// leaves (see Leave), so the others rebalance at once instead of at
	// their next heartbeat.
	Departures *nats.Conn
	Logger     *slog.Logger
}

// Membership is this replica's membership and the environments it owns.
type Membership struct {
	opts        Options
	incarnation uuid.UUID
	// joined is set once this process has held its member id; owned by
	// Run's goroutine (Joined reads it through ready).
	joined bool
	ready  atomic.Bool
	// displaced is closed when another live process took this member id
	// (see displaced); displacedOnce closes it.
	displacedCh   chan struct{}
	displacedOnce sync.Once
	// wake asks Run for a heartbeat now (Rebalance).
	wake chan struct{}
	// changes tells subscribers which environments this member gained or
	// lost.
	changes changes.Topic[Change]

	mu sync.Mutex
	// owned maps each environment this member owns to the epoch it
	// claimed it at.
	owned map[string]int64
	// renewed is when the last heartbeat that the database accepted was
	// sent, by this process's clock: the others count this member live
	// until a lease after it (by the database's clock), so its leases hold
	// here only until a heartbeat interval before that (held).
	renewed time.Time
	// live is how many members were live at the last heartbeat.
	live int

	// What the last read of every environment's owner found, owned by
	// Run's goroutine: the live members then, when it was, and whether
	// this member's share was as assigned (see mustRead).
	seen    map[string]uuid.UUID
	readAt  time.Time
	settled bool
}

// Change says this member gained or lost an environment: the subscriber
// asks Owns or Lease for which.
type Change struct{ EnvironmentID string }

// Lease is an environment's ownership as this member holds it: a write
// on the owner's behalf carries it and checks it against environment_owners
// in the same statement (see Fenced).
type Lease struct {
	Epoch       int64
	Incarnation uuid.UUID

	env        string
	retryAfter time.Duration
}

// New returns a Membership that has not joined yet (Run joins).
func New(opts Options) *Membership {
	return &Membership{opts: opts, incarnation: uuid.New(), owned: map[string]int64{}, wake: make(chan struct{}, 1),
		displacedCh: make(chan struct{})}
}

// interval is the time between heartbeats: a fifth of the lease, so a dead
// member's environments are claimed at most a lease and a fifth after its
// last heartbeat (6 s with the default 5 s lease, one heartbeat a second),
// and a member that misses up to three heartbeats in a row (a slow
// database, a busy machine) still holds its leases.
func (m *Membership) interval() time.Duration { return m.opts.Lease / 5 }

// Subscribe returns a subscription to this member's ownership changes.
// Subscribe before Run starts, so no change falls in between.
func (m *Membership) Subscribe() *changes.Subscription[Change] { return m.changes.Subscribe() }

// Rebalance asks for a heartbeat and rebalance now instead of at the next
// tick: an environment was registered, and its owner should claim it
// before the first request for it arrives. In a burst of registrations the
// wake-ups are served once per wokenGap. It never blocks.
func (m *Membership) Rebalance() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run joins (see settleJoin), then heartbeats and rebalances every
// interval, and whenever Rebalance asks, until ctx ends. Leave ends the
// membership; a member that stops without leaving is dead once its lease
// runs out.
func (m *Membership) Run(ctx context.Context) {
	tick := time.NewTicker(m.interval())
	defer tick.Stop()
	if m.opts.Departures != nil {
		sub, err := m.opts.Departures.Subscribe(departuresSubject, func(*nats.Msg) { m.Rebalance() })
		if err != nil {
			m.opts.Logger.WarnContext(ctx, "not following departures; a member that leaves is followed at the next heartbeat",
				"error", err)
		} else {
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	if !m.joined {
		m.settleJoin(ctx, tick.C)
	}
	woken := false
	wakeUps := rate.NewLimiter(rate.Every(wokenGap), 1)
	for {
		if err := m.beat(ctx, woken); err != nil && ctx.Err() == nil {
			m.opts.Logger.WarnContext(ctx, "membership heartbeat failed; retrying", "member", m.opts.ID, "error", err)
		}
		if lost := m.expire(); lost > 0 {
			m.settled = false
			m.opts.Logger.ErrorContext(ctx, "no heartbeat accepted for a lease: giving up every environment (the others claim them)",
				"member", m.opts.ID, "environments", lost)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			woken = false
		case <-m.wake:
			woken = true
			if wakeUps.Wait(ctx) != nil {
				return
			}
		}
	}
}

// settleJoin heartbeats a process that has not joined yet, claiming
// nothing, until two heartbeats a tick apart read the same live members,
// or a lease has passed — when environments are owned under other
// members' ids, so those members are likely starting too: replicas
// restarted together (an orchestrator replacing a deployment's pods) then
// see each other before any of them claims. Without it the first to join
// claimed the whole fleet and began connecting all of it, only to hand two
// thirds of it over a second later as the other two joined (10,000
// environments on three replicas). A lone replica, or the first start of a
// fleet, claims at once. Kafka's group coordinator delays a new group's
// first rebalance for the same reason.
func (m *Membership) settleJoin(ctx context.Context, tick <-chan time.Time) {
	start := time.Now()
	var seen map[string]uuid.UUID
	for {
		live, err := m.joinBeat(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			m.opts.Logger.WarnContext(ctx, "membership heartbeat failed; retrying", "member", m.opts.ID, "error", err)
		case err == nil && live == nil: // displaced: the process stops
			return
		case err == nil && seen != nil && maps.Equal(live, seen):
			return
		case err == nil && seen == nil && !m.othersOwned(ctx):
			return
		case err == nil:
			seen = live
			m.mu.Lock()
			m.live = len(live)
			m.mu.Unlock()
		}
		if time.Since(start) >= m.opts.Lease {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// othersOwned reports whether an environment is owned by another member
// id, live or not (and says so when it cannot tell).
func (m *Membership) othersOwned(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, m.opts.Lease/2)
	defer cancel()
	others := true
	if err := m.opts.DB.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM environment_owners WHERE member_id <> $1)`,
		m.opts.ID).Scan(&others); err != nil {
		return true
	}
	return others
}

// joinBeat writes the heartbeat and reads the live members; it returns
// none, and no error, if another live process holds the member id.
func (m *Membership) joinBeat(ctx context.Context) (map[string]uuid.UUID, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.Lease/2)
	defer cancel()
	if accepted, err := m.renew(ctx); !accepted {
		return nil, err
	}
	return m.readLive(ctx, m.opts.DB)
}

// wokenGap is the least time between two heartbeats that Rebalance asked
// for. Every replica is woken by every registration, and each woken
// heartbeat reads every environment's owner: served one by one, a burst of
// registrations would read the whole fleet once per registration on every
// replica. The first wake-up after a quiet gap is served at once (a lone
// registration, a member's departure), the rest of a burst once per gap.
const wokenGap = 250 * time.Millisecond

// beat records the heartbeat and, when something may have moved (see
// mustRead; always when woken by Rebalance), rebalances. The first beat of
// a process takes its member id whoever held it (a restarted replica
// replaces its previous incarnation at once); later beats only renew this
// incarnation's row, or take the id back once another incarnation's lease
// ran out.
func (m *Membership) beat(ctx context.Context, woken bool) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.Lease/2)
	defer cancel()
	// A woken heartbeat renews the row only when a tick's would, so a
	// burst of wake-ups adds no writes: the others count this member live
	// either way. Unless another process took the member id since the
	// last renewal: renewing says so (displaced) before this one claims
	// anything under an id no longer its own.
	renewed := !woken || !m.joined || time.Since(m.renewedAt()) >= m.interval()
	if renewed {
		if accepted, err := m.renew(ctx); !accepted {
			return err
		}
	}
	live, err := m.readLive(ctx, m.opts.DB)
	if err != nil {
		return err
	}
	if !renewed && live[m.opts.ID] != m.incarnation {
		if accepted, err := m.renew(ctx); !accepted {
			return err
		}
		if live, err = m.readLive(ctx, m.opts.DB); err != nil {
			return err
		}
	}
	if !woken && !m.mustRead(live) {
		m.mu.Lock()
		m.live = len(live)
		m.mu.Unlock()
		return nil
	}
	err = m.rebalance(ctx, live)
	if err == nil {
		m.ready.Store(true)
	}
	return err
}

// renewedAt is when the last accepted heartbeat was sent.
func (m *Membership) renewedAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.renewed
}

// renew writes this member's heartbeat; the first takes the member id
// whoever held it. It reports whether the database accepted it: not when
// it failed, nor when another live process holds the id (displaced).
func (m *Membership) renew(ctx context.Context) (bool, error) {
	sent := time.Now()
	tag, err := m.opts.DB.Exec(ctx, `
		INSERT INTO members (id, incarnation, advertise_url) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET incarnation = EXCLUDED.incarnation, advertise_url = EXCLUDED.advertise_url,
			heartbeat_time = now(),
			start_time = CASE WHEN members.incarnation = EXCLUDED.incarnation THEN members.start_time ELSE now() END
		WHERE NOT $5 OR members.incarnation = EXCLUDED.incarnation
		   OR members.heartbeat_time < now() - make_interval(secs => $4)`,
		m.opts.ID, m.incarnation, m.opts.AdvertiseURL, m.opts.Lease.Seconds(), m.joined)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		m.displaced(ctx)
		return false, nil
	}
	m.joined = true
	m.mu.Lock()
	m.renewed = sent
	m.mu.Unlock()
	return true, nil
}

// mustRead reports whether a heartbeat must read every environment's
// owner, given the members live now. Ownership moves only when the live
// members change (one joined, left, died or restarted), when an
// environment is registered (Rebalance wakes the heartbeat) or while a
// hand-over is under way; a heartbeat that sees none of these skips the
// read: two small statements a second per replica (the upsert, the live
// members), whatever the fleet's size. The read is repeated at least once
// a lease, so anything else that moved owners (a deletion, a changed pin)
// is followed within one.
func (m *Membership) mustRead(live map[string]uuid.UUID) bool {
	return !m.settled || !maps.Equal(live, m.seen) || time.Since(m.readAt) >= m.opts.Lease
}

// displaced handles another live process holding this member's id: a
// process that started with the same SG_MEMBER_ID (the host name by
// default, so two on one host) while this one ran. The newcomer takes the
// id at its first heartbeat — it cannot tell a live holder from one that
// just crashed, and a restart must take its place at once — so this one,
// the replaced, gives up every environment, stops being ready and says
// so: Displaced tells the process to stop (it exits non-zero). Two copies
// configured alike then take turns failing loudly rather than silently
// sharing one identity.
func (m *Membership) displaced(ctx context.Context) {
	lost := m.setOwned(map[string]int64{}, -1)
	m.ready.Store(false)
	m.displacedOnce.Do(func() {
		m.opts.Logger.ErrorContext(ctx, "another live process took this member id: two replicas run with the same SG_MEMBER_ID "+
			"(the host name by default); give each its own SG_MEMBER_ID. This one stops.", "member", m.opts.ID, "environments", lost)
		close(m.displacedCh)
	})
}

// Displaced is closed once another live process took this member id: the
// process must stop (see displaced).
func (m *Membership) Displaced() <-chan struct{} { return m.displacedCh }

// setOwned replaces what this member owns (and, unless live is negative,
// how many members are live), publishes a change for every environment
// gained, lost or claimed again at another epoch, and returns how many
// were lost.
func (m *Membership) setOwned(owned map[string]int64, live int) (lost int) {
	m.mu.Lock()
	before := m.owned
	m.owned = owned
	if live >= 0 {
		m.live = live
	}
	m.mu.Unlock()
	for env, epoch := range before {
		if now, ok := owned[env]; !ok || now != epoch {
			m.changes.Publish(Change{EnvironmentID: env})
		}
		if _, ok := owned[env]; !ok {
			lost++
		}
	}
	for env := range owned {
		if _, ok := before[env]; !ok {
			m.changes.Publish(Change{EnvironmentID: env})
		}
	}
	return lost
}

// owner is one environment_owners row, or an environment without one.
type owner struct {
	env         string
	pin         *string // the PinLabel's value
	member      *string
	incarnation *uuid.UUID
	epoch       *int64
}

// rebalance claims what the assignment gives this member and no live member
// holds, and hands what it gives another member straight to that member.
// It notes whether this member's share is as assigned (settled): until it
// is, every heartbeat reads again, for the hand-overs other members owe it.
func (m *Membership) rebalance(ctx context.Context, live map[string]uuid.UUID) error {
	m.settled = false
	readAt := time.Now()
	owners, err := m.readOwners(ctx, m.opts.DB)
	if err != nil {
		return err
	}
	assigned := assign(owners, live)
	owned := map[string]int64{}
	var fresh, taken, handed []owner
	pending := 0 // assigned to this member, not (yet) its
	for _, o := range owners {
		mine := m.mine(o)
		if assigned[o.env] == m.opts.ID && !mine {
			pending++
		}
		// A member's environments are free once it is dead, or once it
		// restarted: an incarnation no longer live claims nothing, and
		// whoever the assignment names claims them at a new epoch. (Had
		// only the restarted member's own id counted as free, one of them
		// assigned elsewhere would be waited for by its assignee, for a
		// hand-over the new incarnation never makes.)
		ownerLive := o.member != nil && o.incarnation != nil && live[*o.member] == *o.incarnation
		free := !ownerLive
		switch {
		case mine && assigned[o.env] == m.opts.ID:
			owned[o.env] = *o.epoch
		case mine:
			handed = append(handed, o)
		case assigned[o.env] == m.opts.ID && o.epoch == nil:
			fresh = append(fresh, o)
		case assigned[o.env] == m.opts.ID && free:
			taken = append(taken, o)
		}
	}
	claimed, err := m.claim(ctx, fresh, taken)
	maps.Copy(owned, claimed)
	handedOver, handErr := m.handOver(ctx, m.opts.DB, handed, assigned, live)
	if len(claimed)+handedOver > 0 {
		m.opts.Logger.InfoContext(ctx, "environments handed over", "member", m.opts.ID, "claimed", len(claimed), "handed_over", handedOver,
			"owned", len(owned), "live_members", len(live))
	}
	m.setOwned(owned, len(live))
	if err = errors.Join(err, handErr); err == nil {
		m.seen, m.readAt = live, readAt
		m.settled = pending == len(claimed) && handedOver == len(handed)
	}
	return err
}

// mine reports whether o is held by this member in this incarnation.
func (m *Membership) mine(o owner) bool {
	return o.member != nil && *o.member == m.opts.ID && o.incarnation != nil && *o.incarnation == m.incarnation
}

// querier runs statements: the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// readLive returns the live members (heartbeat within the lease, by the
// database's clock) with their incarnations.
func (m *Membership) readLive(ctx context.Context, q querier) (map[string]uuid.UUID, error) {
	rows, err := q.Query(ctx, `SELECT id, incarnation FROM members WHERE heartbeat_time >= now() - make_interval(secs => $1)`,
		m.opts.Lease.Seconds())
	if err != nil {
		return nil, err
	}
	live := map[string]uuid.UUID{}
	var id string
	var incarnation uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&id, &incarnation}, func() error {
		live[id] = incarnation
		return nil
	})
	return live, err
}

// readOwners returns every environment with its owner row and pin.
func (m *Membership) readOwners(ctx context.Context, q querier) ([]owner, error) {
	rows, err := q.Query(ctx, `SELECT e.id, e.labels->>$1, o.member_id, o.incarnation, o.epoch
		FROM environments e LEFT JOIN environment_owners o ON o.environment_id = e.id`, PinLabel)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (owner, error) {
		var o owner
		err := row.Scan(&o.env, &o.pin, &o.member, &o.incarnation, &o.epoch)
		return o, err
	})
}

// assign is Assign over what readOwners and readLive returned.
func assign(owners []owner, live map[string]uuid.UUID) map[string]string {
	envs := make([]string, len(owners))
	pins := map[string]string{}
	for i, o := range owners {
		envs[i] = o.env
		if o.pin != nil {
			pins[o.env] = *o.pin
		}
	}
	return Assign(envs, slices.Sorted(maps.Keys(live)), pins)
}

// claim takes, in one statement each, the environments without an owner
// row (fresh) and those whose owner row is as read (taken: compare and set
// on the epoch, which it raises); a row changed meanwhile was claimed by
// someone else and is left out. It returns the epochs it claimed.
func (m *Membership) claim(ctx context.Context, fresh, taken []owner) (map[string]int64, error) {
	claimed := map[string]int64{}
	collect := func(rows pgx.Rows, err error) error {
		if err != nil {
			return err
		}
		var env string
		var epoch int64
		_, err = pgx.ForEachRow(rows, []any{&env, &epoch}, func() error {
			claimed[env] = epoch
			m.opts.Logger.Debug("environment claimed", "member", m.opts.ID, "environment", env, "epoch", epoch)
			return nil
		})
		return err
	}
	var errs []error
	if len(fresh) > 0 {
		ids := make([]string, len(fresh))
		for i, o := range fresh {
			ids[i] = o.env
		}
		errs = append(errs, collect(m.opts.DB.Query(ctx, `INSERT INTO environment_owners (environment_id, member_id, incarnation, epoch)
			SELECT id, $2, $3, 1 FROM unnest($1::text[]) AS id
			ON CONFLICT (environment_id) DO NOTHING RETURNING environment_id, epoch`, ids, m.opts.ID, m.incarnation)))
	}
	if len(taken) > 0 {
		ids, epochs := make([]string, len(taken)), make([]int64, len(taken))
		for i, o := range taken {
			ids[i], epochs[i] = o.env, *o.epoch
		}
		errs = append(errs, collect(m.opts.DB.Query(ctx, `UPDATE environment_owners o SET member_id = $3, incarnation = $4,
				epoch = o.epoch + 1, claim_time = now()
			FROM unnest($1::text[], $2::bigint[]) AS seen (environment_id, epoch)
			WHERE o.environment_id = seen.environment_id AND o.epoch = seen.epoch
			RETURNING o.environment_id, o.epoch`, ids, epochs, m.opts.ID, m.incarnation)))
	}
	if err := errors.Join(errs...); err != nil {
		return claimed, fmt.Errorf("claim environments: %w", err)
	}
	return claimed, nil
}

// handOver gives, in one statement, the environments this member still
// holds at the epochs it read to the member the assignment names, in the
// incarnation it is live in, raising the epoch: an environment always has
// one owner row naming one member, and the new owner finds it its own at
// its next heartbeat (its writes carry the new epoch; this member's old
// one is fenced off at once). With no live member to take one, it is left
// without an owner. It returns how many it handed over.
func (m *Membership) handOver(ctx context.Context, q querier, owners []owner, assigned map[string]string, live map[string]uuid.UUID) (int, error) {
	if len(owners) == 0 {
		return 0, nil
	}
	ids, epochs := make([]string, len(owners)), make([]int64, len(owners))
	members, incarnations := make([]*string, len(owners)), make([]*uuid.UUID, len(owners))
	for i, o := range owners {
		ids[i], epochs[i] = o.env, *o.epoch
		if to, ok := live[assigned[o.env]]; ok {
			member := assigned[o.env]
			members[i], incarnations[i] = &member, &to
		}
	}
	tag, err := q.Exec(ctx, `UPDATE environment_owners o SET member_id = h.member_id, incarnation = h.incarnation,
			epoch = o.epoch + 1, claim_time = now()
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::uuid[]) AS h (environment_id, epoch, member_id, incarnation)
		WHERE o.environment_id = h.environment_id AND o.epoch = h.epoch AND o.member_id = $5 AND o.incarnation = $6`,
		ids, epochs, members, incarnations, m.opts.ID, m.incarnation)
	if err != nil {
		return 0, fmt.Errorf("hand environments over: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// departuresSubject is the NATS subject of departure notices. A notice is
// only a hint to rebalance now: one lost (NATS down, another gateway
// deployment on the same NATS) costs at most a heartbeat interval, never
// correctness, so it travels without JetStream.
const departuresSubject = "storage-gateway.membership.departures"

// Leave hands every environment this member owns to the member the
// assignment without it names, deletes its row and tells the others
// (Departures), so they own them at once instead of after the lease.
func (m *Membership) Leave(ctx context.Context) error {
	if err := m.leave(ctx); err != nil {
		return err
	}
	if nc := m.opts.Departures; nc != nil {
		if err := errors.Join(nc.Publish(departuresSubject, []byte(m.opts.ID)), nc.FlushWithContext(ctx)); err != nil {
			m.opts.Logger.WarnContext(ctx, "could not tell the other members this one left; they follow at their next heartbeat",
				"member", m.opts.ID, "error", err)
		}
	}
	return nil
}

func (m *Membership) leave(ctx context.Context) error {
	m.setOwned(map[string]int64{}, -1)
	return pgx.BeginFunc(ctx, m.opts.DB, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM members WHERE id = $1 AND incarnation = $2`, m.opts.ID, m.incarnation)
		if err != nil || tag.RowsAffected() == 0 {
			return err // never joined, or displaced: nothing of ours to hand over
		}
		live, err := m.readLive(ctx, tx)
		if err != nil {
			return err
		}
		owners, err := m.readOwners(ctx, tx)
		if err != nil {
			return err
		}
		assigned := assign(owners, live)
		var held []owner
		for _, o := range owners {
			if m.mine(o) {
				held = append(held, o)
			}
		}
		_, err = m.handOver(ctx, tx, held, assigned, live)
		return err
	})
}

// Joined is a readiness check: an error until this member's first
// heartbeat and rebalance succeeded, so a load balancer sends requests only
// to replicas that know what they own, and again whenever this process
// holds no membership: no heartbeat accepted for a lease, or its member id
// taken by another process.
func (m *Membership) Joined(context.Context) error {
	select {
	case <-m.displacedCh:
		return fmt.Errorf("member id %q (SG_MEMBER_ID) is held by another live process; this one owns nothing and stops", m.opts.ID)
	default:
	}
	if !m.ready.Load() {
		return errors.New("not joined the other replicas yet (first heartbeat pending)")
	}
	m.mu.Lock()
	held := m.held()
	m.mu.Unlock()
	if !held {
		return errors.New("no heartbeat accepted for a lease: this replica owns nothing until the database accepts one")
	}
	return nil
}

// held reports whether this member's claims still hold by its own clock
// (see renewed); the caller holds m.mu. A process that was frozen (a GC
// pause, SIGSTOP) or cut off from the database past it owns nothing until
// a heartbeat is accepted again and the rebalance says what is still its.
func (m *Membership) held() bool {
	return time.Since(m.renewed) < m.opts.Lease-m.interval()
}

// expire gives up every environment once the leases no longer hold (see
// held), telling subscribers, and returns how many it gave up.
func (m *Membership) expire() int {
	m.mu.Lock()
	held := m.held()
	m.mu.Unlock()
	if held {
		return 0
	}
	return m.setOwned(map[string]int64{}, -1)
}

// Owns reports whether this member owns env.
func (m *Membership) Owns(env string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.owned[env]
	return ok && m.held()
}

// Lease returns this member's lease on env, or an error wrapping
// ErrNotOwner if it does not own it. The error's Retry-After is a
// heartbeat: the time a live member takes to claim an environment that has
// no owner (one whose owner died waits for the lease as well).
func (m *Membership) Lease(env string) (Lease, error) {
	m.mu.Lock()
	epoch, ok := m.owned[env]
	ok = ok && m.held()
	m.mu.Unlock()
	c := Lease{Epoch: epoch, Incarnation: m.incarnation, env: env, retryAfter: m.interval()}
	if !ok {
		return Lease{}, c.Lost()
	}
	return c, nil
}

var (
	liveMembersDesc = prometheus.NewDesc("storage_gateway_member_live_members",
		"Members (replicas) live at this replica's last heartbeat.", nil, nil)
	ownedDesc = prometheus.NewDesc("storage_gateway_member_owned_environments",
		"Environments this replica owns.", nil, nil)
)

// Register exposes the membership's gauges in reg.
func (m *Membership) Register(reg prometheus.Registerer) error { return reg.Register(collector{m}) }

type collector struct{ m *Membership }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- liveMembersDesc
	ch <- ownedDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	live, owned := c.m.live, len(c.m.owned)
	c.m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(liveMembersDesc, prometheus.GaugeValue, float64(live))
	ch <- prometheus.MustNewConstMetric(ownedDesc, prometheus.GaugeValue, float64(owned))
}
