package membership

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dcm-project/storage-gateway/internal/changes"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// FenceSQL is the condition that holds only while a lease is current: env,
// epoch and incarnation are the statement's expressions for the
// environment and the lease's two parts (placeholders such as "$1"; never
// input). It locks the owner row it finds (FOR SHARE) until the write's
// transaction ends, so a claim by another member waits for that write to
// commit, and a write that starts after such a claim committed finds a
// later epoch or another incarnation and is refused: a stalled former
// owner can never write after it lost the environment. A hand-over by the
// owner itself raises the epoch, so nothing is written on its behalf once
// it let go.
//
// A fenced write therefore locks the owner row before the environment's row
// (which it updates, or which its foreign key shares). A transaction that
// locks the environment's row and then needs the owner row — deleting the
// environment, whose cascade deletes it — takes the owner row first
// (LockOwnerSQL), or it and a fenced write can each hold what the other
// waits for.
func FenceSQL(env, epoch, incarnation string) string {
	return `EXISTS (SELECT 1 FROM environment_owners fence WHERE fence.environment_id = ` + env +
		` AND fence.epoch = ` + epoch + ` AND fence.incarnation = ` + incarnation + ` FOR SHARE)`
}

// LockOwnerSQL is the statement that locks environment env's owner row, if
// it has one, for the rest of the transaction (env: an expression such as
// "$1"; never input), ahead of locking the environment's row (see
// FenceSQL). Fenced writes under way finish first; later ones wait, and
// find no owner row once the environment is gone.
func LockOwnerSQL(env string) string {
	return `SELECT FROM environment_owners WHERE environment_id = ` + env + ` FOR UPDATE`
}

// ErrNotOwner says this replica does not own the environment a write was
// for (any more): it was handed over, or is being.
var ErrNotOwner = errors.New("this replica does not own the environment")

// NotOwned is the error a request gets for an environment this replica
// does not own and cannot forward: it is between owners, which lasts at
// most until a live member claims it (a heartbeat, or the lease of one that
// died).
func NotOwned(env string, retryAfter time.Duration) error {
	return errors.Join(ErrNotOwner, fault.RetryLater(retryAfter, "environment %s is being handed over between replicas; retry after the time in Retry-After", env))
}

// Leases is the ownership writers consult: a Membership.
type Leases interface {
	// Lease returns this replica's lease on env, or an error wrapping
	// ErrNotOwner (a 503 with Retry-After for a request) if it has none.
	Lease(env string) (Lease, error)
}

// Lost is the error of a write the fence refused: the lease is no longer
// current.
func (c Lease) Lost() error { return NotOwned(c.env, c.retryAfter) }

// Ownership is what the parts that act for owned environments only follow:
// the leases, and a notice whenever one is gained or lost (a Membership).
// Owns answers a yes or no; Lease builds the 503 a request answers for an
// environment owned elsewhere, so loops over every environment ask Owns
// first and Lease only for their own.
type Ownership interface {
	Leases
	Owns(env string) bool
	Subscribe() *changes.Subscription[Change]
}

// Peer is another live member as the registry knows it: its id, the
// incarnation it runs in (a restart is a new one) and where it is reached.
type Peer struct {
	ID           string
	Incarnation  uuid.UUID
	AdvertiseURL string
}

// Owner returns the member that owns env now, and where it is reached: a
// live member in the incarnation that claimed it (AdvertiseURL empty when
// it advertises none: reached over NATS only). An environment without
// one (being handed over), or owned by this member by the database's
// account but not yet by its own (a claim in flight), is NotOwned; one
// that is not registered is NotFound.
func (m *Membership) Owner(ctx context.Context, env string) (Peer, error) {
	var member, advertised *string
	var incarnation *uuid.UUID
	err := m.opts.DB.QueryRow(ctx, `SELECT m.id, m.incarnation, m.advertise_url FROM environments e
		LEFT JOIN environment_owners o ON o.environment_id = e.id
		LEFT JOIN members m ON m.id = o.member_id AND m.incarnation = o.incarnation
			AND m.heartbeat_time >= now() - make_interval(secs => $2)
		WHERE e.id = $1`, env, m.opts.Lease.Seconds()).Scan(&member, &incarnation, &advertised)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Peer{}, fault.New(fault.NotFound, "environment %q not found", env)
	case err != nil:
		return Peer{}, err
	case member == nil || *member == m.opts.ID:
		return Peer{}, NotOwned(env, m.interval())
	}
	return Peer{ID: *member, Incarnation: *incarnation, AdvertiseURL: *advertised}, nil
}

// Incarnation is this process's incarnation of its member id: a request
// bound to an earlier one (before a restart) is not for this process.
func (m *Membership) Incarnation() uuid.UUID { return m.incarnation }

// Hold checks claim as the first statement of tx, a transaction of several
// writes for the lease's environment, and keeps the owner row locked until
// tx ends (see FenceSQL): the writes after it are fenced as one.
func Hold(ctx context.Context, tx pgx.Tx, lease Lease) error {
	var held bool
	if err := tx.QueryRow(ctx, `SELECT `+FenceSQL("$1", "$2", "$3"), lease.env, lease.Epoch, lease.Incarnation).Scan(&held); err != nil {
		return err
	}
	if !held {
		return lease.Lost()
	}
	return nil
}
