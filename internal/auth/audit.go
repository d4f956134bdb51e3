package auth

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/paging"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// Expired audit records are pruned every auditPruneInterval, at most
// auditPruneBatch rows per statement so pruning never holds long locks.
const (
	auditPruneInterval = time.Hour
	auditPruneBatch    = 10000
)

// AuditEvent is one audited request: who did what to which environment and
// volume, and how it ended. It never holds a secret.
type AuditEvent struct {
	ID            int64
	Time          time.Time
	RequestID     string
	Subject       string
	Name          string
	Roles         []Role
	AuthMethod    Method
	Action        string
	EnvironmentID string
	VolumeID      string
	// Status is the HTTP status the request was answered with.
	Status int
	// Peer is the TCP peer address.
	Peer string
}

// AuditLog records audit events to the structured log and the audit_events
// table, lists them, and prunes them after the retention period.
type AuditLog struct {
	db        *pgxpool.Pool
	log       *slog.Logger
	retention time.Duration
	group     *postgres.Group
}

// AuditOptions configure an AuditLog.
type AuditOptions struct {
	DB     *pgxpool.Pool
	Logger *slog.Logger
	// Retention is how long stored events are kept (SG_AUDIT_RETENTION).
	Retention time.Duration
	// Group stores the events with the process's other hot writes (nil:
	// a group of the log's own).
	Group *postgres.Group
}

// NewAuditLog returns an AuditLog; Run prunes it.
func NewAuditLog(opts AuditOptions) *AuditLog {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Group == nil {
		opts.Group = postgres.NewGroup(opts.DB)
	}
	return &AuditLog{db: opts.DB, log: opts.Logger, retention: opts.Retention, group: opts.Group}
}

// Record logs e and stores it, and returns the store's error: the API
// then answers a change it made 503 instead of success (the caller's retry
// converges and is recorded). A store that fails is logged too, with the
// event, so the log still holds it.
func (a *AuditLog) Record(ctx context.Context, e AuditEvent) error {
	roles := RoleNames(e.Roles)
	attrs := []slog.Attr{
		slog.Bool("audit", true), slog.String("action", e.Action), slog.String("subject", e.Subject),
		slog.String("name", e.Name), slog.Any("roles", roles), slog.String("auth_method", string(e.AuthMethod)),
		slog.String("environment", e.EnvironmentID), slog.String("volume", e.VolumeID),
		slog.Int("status", e.Status), slog.String("peer", e.Peer), slog.String("request_id", e.RequestID),
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "audit", attrs...)
	err := a.store(ctx, e)
	if err != nil {
		a.log.LogAttrs(ctx, slog.LevelError, "audit event not stored; the log line above is its only record",
			slog.String("request_id", e.RequestID), slog.String("error", err.Error()))
	}
	return err
}

// store writes e with the other writes of the moment (postgres.Group): no
// request is answered before its event is stored, and under load the audit
// log costs the database one commit per batch, not one per request.
func (a *AuditLog) store(ctx context.Context, e AuditEvent) error {
	return a.group.Do(ctx, func(b postgres.Batch) {
		b.Queue(nil, `INSERT INTO audit_events
			(request_id, subject, name, roles, auth_method, action, environment_id, volume_id, status, peer)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			e.RequestID, e.Subject, e.Name, RoleNames(e.Roles), string(e.AuthMethod), e.Action, e.EnvironmentID, e.VolumeID, e.Status, e.Peer)
	})
}

// AuditQuery selects audit events, newest first.
type AuditQuery struct {
	Subject string
	Action  string
	// Environments limits the events to these environments; nil means all
	// (and events of no environment), an empty list means none.
	Environments []string
	Since, Until *time.Time
	MaxPageSize  int
	PageToken    string
}

// AuditPage is one page of events.
type AuditPage struct {
	Events        []AuditEvent
	NextPageToken string
}

// List returns one page of events matching q, newest first.
func (a *AuditLog) List(ctx context.Context, q AuditQuery) (AuditPage, error) {
	size, err := paging.Size(q.MaxPageSize)
	if err != nil {
		return AuditPage{}, err
	}
	if q.Since != nil && q.Until != nil && q.Until.Before(*q.Since) {
		return AuditPage{}, fault.Invalid("end_time", "must not be before start_time")
	}
	key := []any{q.Subject, q.Action, q.Environments, q.Since, q.Until}
	after, err := paging.After(q.PageToken, key)
	if err != nil {
		return AuditPage{}, err
	}
	before := int64(0)
	if after != "" {
		if before, err = strconv.ParseInt(after, 10, 64); err != nil {
			return AuditPage{}, fault.Invalid("page_token", "is not a token issued for this query")
		}
	}
	if q.Environments != nil && len(q.Environments) == 0 {
		return AuditPage{Events: []AuditEvent{}}, nil
	}
	rows, err := a.db.Query(ctx, `SELECT id, time, request_id, subject, name, roles, auth_method, action,
			environment_id, volume_id, status, peer
		FROM audit_events
		WHERE ($1 = '' OR subject = $1) AND ($2 = '' OR action = $2)
		  AND ($3::text[] IS NULL OR environment_id = ANY($3))
		  AND ($4::timestamptz IS NULL OR time >= $4) AND ($5::timestamptz IS NULL OR time < $5)
		  AND ($6 = 0 OR id < $6)
		ORDER BY id DESC LIMIT $7`, q.Subject, q.Action, q.Environments, q.Since, q.Until, before, size+1)
	if err != nil {
		return AuditPage{}, err
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEvent, error) {
		var e AuditEvent
		var roles []string
		var method string
		err := row.Scan(&e.ID, &e.Time, &e.RequestID, &e.Subject, &e.Name, &roles, &method, &e.Action,
			&e.EnvironmentID, &e.VolumeID, &e.Status, &e.Peer)
		for _, r := range roles {
			e.Roles = append(e.Roles, Role(r))
		}
		e.AuthMethod = Method(method)
		return e, err
	})
	if err != nil {
		return AuditPage{}, err
	}
	var page AuditPage
	page.Events, page.NextPageToken = paging.Cut(events, size, func(e AuditEvent) string { return strconv.FormatInt(e.ID, 10) }, key)
	if page.Events == nil {
		page.Events = []AuditEvent{}
	}
	return page, nil
}

// Run prunes expired events until ctx ends.
func (a *AuditLog) Run(ctx context.Context) {
	for {
		if _, err := a.Prune(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.log.WarnContext(ctx, "pruning audit events failed; retrying later", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(auditPruneInterval):
		}
	}
}

// Prune deletes events older than the retention period and returns how many.
func (a *AuditLog) Prune(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := a.db.Exec(ctx, `DELETE FROM audit_events WHERE id IN (
			SELECT id FROM audit_events WHERE time < now() - $1::interval LIMIT $2)`, a.retention, auditPruneBatch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < auditPruneBatch {
			return total, nil
		}
	}
}
