package outbox

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Relay timing: a claimed batch is leased for claimLease — longer than
// publishing a batch can take (its publishes go out together, each
// acknowledged within publishTimeout or failed) yet short, because a replica
// that dies mid-batch holds back its volumes' later events until the lease
// expires and another replica takes over; after a failed publish the relay
// backs off from minBackoff up to maxBackoff; it scans the outbox at least
// every pollInterval for rows queued by other replicas (the rows its own
// writers queued it claims by id); batchSize rows per claim.
const (
	claimLease     = 30 * time.Second
	minBackoff     = 500 * time.Millisecond
	maxBackoff     = 30 * time.Second
	pollInterval   = time.Second
	publishTimeout = 5 * time.Second
	batchSize      = 100
)

// Relay publishes the outbox to NATS, in order, at least once: a row is
// marked sent only after JetStream acknowledged it, with Nats-Msg-Id set to
// the CloudEvent id so the stream drops a repeat. It runs safely in several
// replicas: rows are claimed with FOR UPDATE SKIP LOCKED and a lease. A
// claimed batch holds at most one event per volume (a volume's next event
// is claimable only once the one before is sent), so its publishes go out
// together and their acknowledgements are awaited together: one claim and
// one update per batch, not a round trip to NATS and one to Postgres per
// event.
//
// The events this replica's writers queue are claimed by their ids
// (Notify), which are primary-key lookups. Scanning for unsent rows is kept
// for what no writer here named (other replicas' rows, a failed batch, a
// restart) at most once per pollInterval: every sent row leaves a dead
// entry in the unsent indexes until vacuum, so under a steady stream of
// events a scan per wake-up walks thousands of them.
type Relay struct {
	db      *pgxpool.Pool
	conn    *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	metrics relayMetrics
	wake    chan struct{}
	// noticed holds the ids Notify named that no claim has tried yet;
	// scanned is when the outbox was last scanned (zero: scan next).
	noticed struct {
		sync.Mutex
		ids     []int64
		scanned time.Time
	}
	// retention is how long sent events are kept; pruned is when Run last
	// pruned them.
	retention time.Duration
	pruned    time.Time

	// streams holds, per subject, when it was last asked whether a
	// stream covers it and the answer (asked again after streamCheckTTL),
	// and whether its absence was logged.
	streamMu sync.Mutex
	streams  map[string]*streamCheck
}

// streamCheck is what is known of one subject's stream.
type streamCheck struct {
	checked time.Time
	found   bool
	logged  bool
}

// streamCheckTTL is how long the answer to "does a stream cover the
// subject" is trusted.
const streamCheckTTL = 30 * time.Second

// RelayOptions wire a Relay.
type RelayOptions struct {
	DB   *pgxpool.Pool
	Conn *nats.Conn
	// Metrics receives the relay's metrics.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
	// Retention is how long sent events stay in the outbox (for
	// inspection) before Run prunes them; 0 keeps them forever.
	Retention time.Duration
}

// NewRelay returns a relay; Run starts it.
func NewRelay(opts RelayOptions) (*Relay, error) {
	// The timeout settles every asynchronous publish: acknowledged, or
	// failed within publishTimeout.
	js, err := jetstream.New(opts.Conn, jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err != nil {
		return nil, err
	}
	return &Relay{db: opts.DB, conn: opts.Conn, js: js, log: opts.Logger.With("component", "relay"), retention: opts.Retention,
		metrics: newRelayMetrics(opts.Metrics, opts.DB), wake: make(chan struct{}, 1), streams: map[string]*streamCheck{}}, nil
}

// pruneInterval is how often Run prunes sent events; pruneBatch bounds one
// delete, so pruning a large backlog never holds long locks.
const (
	pruneInterval = 10 * time.Minute
	pruneBatch    = 1000
)

// Prune deletes sent events older than the retention and returns how many.
func (r *Relay) Prune(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := r.db.Exec(ctx, `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox WHERE sent_time < now() - $1::interval ORDER BY sent_time LIMIT $2)`,
			r.retention.String(), pruneBatch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// prune runs Prune when it is due.
func (r *Relay) prune(ctx context.Context) {
	if r.retention <= 0 || time.Since(r.pruned) < pruneInterval {
		return
	}
	r.pruned = time.Now()
	n, err := r.Prune(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		r.log.WarnContext(ctx, "prune sent status events (retried later)", "error", err)
	case n > 0:
		r.log.InfoContext(ctx, "sent status events pruned", "count", n, "retention", r.retention.String())
	}
}

// maxNoticed bounds the ids kept for claiming (while NATS is down, say):
// past it they are forgotten and the next pass scans for them instead.
const maxNoticed = 10 * batchSize

// Notify wakes the relay: the events with these outbox ids were queued.
func (r *Relay) Notify(ids []int64) {
	r.noticed.Lock()
	if r.noticed.ids = append(r.noticed.ids, ids...); len(r.noticed.ids) > maxNoticed {
		r.noticed.ids, r.noticed.scanned = nil, time.Time{}
	}
	r.noticed.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take returns the first batchSize ids Notify named, forgetting them.
func (r *Relay) take() []int64 {
	r.noticed.Lock()
	defer r.noticed.Unlock()
	n := min(len(r.noticed.ids), batchSize)
	ids := slices.Clone(r.noticed.ids[:n])
	if r.noticed.ids = r.noticed.ids[n:]; len(r.noticed.ids) == 0 {
		r.noticed.ids = nil
	}
	return ids
}

// noticeFirst puts ids back before the others noticed: they are older.
func (r *Relay) noticeFirst(ids []int64) {
	if len(ids) == 0 {
		return
	}
	r.noticed.Lock()
	r.noticed.ids = append(ids, r.noticed.ids...)
	r.noticed.Unlock()
}

// lastScan is when the outbox was last scanned (zero: scan next).
func (r *Relay) lastScan() time.Time {
	r.noticed.Lock()
	defer r.noticed.Unlock()
	return r.noticed.scanned
}

func (r *Relay) setScanned(t time.Time) {
	r.noticed.Lock()
	r.noticed.scanned = t
	r.noticed.Unlock()
}

// Run publishes until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		r.prune(ctx)
		err := r.drain(ctx, false) // it scans when one is due
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			r.log.WarnContext(ctx, "publishing status events failed; retrying", "error", err, "retry_in", backoff)
		default:
			backoff = 0
		}
		if err != nil {
			r.setScanned(time.Time{}) // what failed is found again by a scan
		}
		// A new event wakes the relay, but does not cut a backoff short:
		// NATS is down.
		wait, wake := pollInterval, r.wake
		if backoff > 0 {
			wait, wake = backoff, nil
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(wait):
		}
	}
}

// outboxRow is one claimed event.
type outboxRow struct {
	id      int64
	eventID string
	status  string
	subject string
	event   []byte
}

// Drain publishes claimed batches until the outbox is empty, ctx ends or a
// publish fails (the batch's unacknowledged rows are released, keeping
// order).
func (r *Relay) Drain(ctx context.Context) error { return r.drain(ctx, true) }

// drain publishes the noticed events and, if scan, scans for the rest
// until none is left: see Drain. A scan also runs whenever pollInterval has
// passed since the last, however many notices keep arriving, so rows no
// writer here named never wait on this replica's load. A noticed event
// that could not be claimed (an earlier event of its volume was unsent, or
// another replica holds it) is tried again by id once the batch is sent,
// if the batch claimed anything, and otherwise left to a scan.
func (r *Relay) drain(ctx context.Context, scan bool) error {
	for {
		due := time.Since(r.lastScan()) >= pollInterval
		var ids []int64
		if !due {
			ids = r.take()
		}
		scanning := due || len(ids) == 0
		if scanning && !due && !scan {
			return nil
		}
		if scanning {
			r.setScanned(time.Now())
		}
		rows, token, err := r.claim(ctx, ids)
		switch {
		case err != nil:
			return err
		case scanning:
			scan = len(rows) > 0 // until a scan finds nothing
		case len(rows) == 0:
			scan = true
		}
		if len(rows) == 0 {
			continue
		}
		acked, err := r.publish(ctx, rows)
		// Acknowledged rows are recorded even if ctx ends now, or they
		// would be published again (deduplicated, but in order only by
		// luck).
		if markErr := r.markSent(ctx, acked); markErr != nil {
			r.release(ctx, unacknowledged(rows, acked), token)
			return markErr
		}
		for _, row := range acked {
			r.metrics.published.WithLabelValues(row.status).Inc()
		}
		if err != nil {
			r.metrics.failures.Add(float64(len(rows) - len(acked)))
			r.release(ctx, unacknowledged(rows, acked), token)
			return err
		}
		r.noticeFirst(unclaimed(ids, rows))
	}
}

// unclaimed is ids less those of rows.
func unclaimed(ids []int64, rows []outboxRow) []int64 {
	return slices.DeleteFunc(ids, func(id int64) bool {
		return slices.ContainsFunc(rows, func(row outboxRow) bool { return row.id == id })
	})
}

// unacknowledged is rows less the acknowledged ones.
func unacknowledged(rows, acked []outboxRow) []outboxRow {
	return slices.DeleteFunc(slices.Clone(rows), func(row outboxRow) bool {
		return slices.ContainsFunc(acked, func(a outboxRow) bool { return a.id == row.id })
	})
}

// bookkeepingTimeout bounds the writes that must happen even when the
// caller's context has ended (marking an acknowledged event sent, releasing
// a lease), so a hung database still cannot hold them forever.
const bookkeepingTimeout = 5 * time.Second

func bookkeeping(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
}

// markSent records acknowledged rows as sent, in one statement.
func (r *Relay) markSent(ctx context.Context, rows []outboxRow) error {
	if len(rows) == 0 {
		return nil
	}
	ctx, cancel := bookkeeping(ctx)
	defer cancel()
	_, err := r.db.Exec(ctx, `UPDATE outbox SET sent_time = now(), claimed_until = NULL WHERE id = ANY($1)`, ids(rows))
	return err
}

func ids(rows []outboxRow) []int64 {
	out := make([]int64, len(rows))
	for i, row := range rows {
		out[i] = row.id
	}
	return out
}

// claim leases, per volume, its oldest unsent event if no live lease holds
// it: among the rows ids names, or the first batchSize the outbox holds
// when ids is empty. Only a volume's first unsent event is ever claimable,
// so replicas relaying side by side can never publish a volume's events out
// of order. The lease carries a token, so releasing it can never drop a
// lease another replica took after this one expired. "First unsent" is
// asked as the least id of the volume's unsent events, which Postgres
// answers from the first live entry of the per-volume index; asked as "no
// earlier unsent event exists" it chose the unsent-by-id index and walked
// its dead entries.
func (r *Relay) claim(ctx context.Context, ids []int64) ([]outboxRow, uuid.UUID, error) {
	token := uuid.New()
	which := `o.sent_time IS NULL`
	if len(ids) > 0 {
		which = `o.id = ANY($4) AND ` + which
	}
	args := []any{claimLease.String(), batchSize, token}
	if len(ids) > 0 {
		args = append(args, ids)
	}
	rows, err := r.db.Query(ctx, `
		UPDATE outbox SET claimed_until = now() + $1::interval, claim_token = $3, attempts = attempts + 1
		WHERE id IN (
			SELECT o.id FROM outbox o
			WHERE `+which+` AND (o.claimed_until IS NULL OR o.claimed_until < now())
			  AND o.id = (SELECT min(p.id) FROM outbox p
			              WHERE p.environment_id = o.environment_id AND p.volume_id = o.volume_id AND p.sent_time IS NULL)
			ORDER BY o.id LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING id, event_id, status, subject, event`, args...)
	if err != nil {
		return nil, token, err
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := row.Scan(&o.id, &o.eventID, &o.status, &o.subject, &o.event)
		return o, err
	})
	// UPDATE ... RETURNING has no order; publishing must follow the outbox's.
	slices.SortFunc(claimed, func(a, b outboxRow) int { return cmp.Compare(a.id, b.id) })
	return claimed, token, err
}

// release gives claimed rows back for the next claim, also after ctx ended.
func (r *Relay) release(ctx context.Context, rows []outboxRow, token uuid.UUID) {
	if len(rows) == 0 {
		return
	}
	ctx, cancel := bookkeeping(ctx)
	defer cancel()
	if _, err := r.db.Exec(ctx, `UPDATE outbox SET claimed_until = NULL, claim_token = NULL
		WHERE id = ANY($1) AND claim_token = $2`, ids(rows), token); err != nil {
		r.log.WarnContext(ctx, "release claimed status events (their lease expires anyway)", "error", err)
	}
}

// publish sends a batch and returns the rows it acknowledged, in order:
// each row goes to its subject, through JetStream where a stream covers the
// subject, and otherwise as a core publish that one flush confirms (said
// once per subject). A batch holds at most one event per volume or
// snapshot, so the order among its subjects does not matter.
func (r *Relay) publish(ctx context.Context, rows []outboxRow) ([]outboxRow, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	var firstErr error
	var plain []outboxRow
	futures := make([]jetstream.PubAckFuture, 0, len(rows))
	sent := make([]outboxRow, 0, len(rows))
	for _, row := range rows {
		stream, err := r.streamExists(ctx, row.subject)
		if err != nil {
			firstErr = err
			break
		}
		if !stream {
			plain = append(plain, row)
			continue
		}
		msg := nats.NewMsg(row.subject)
		msg.Data = row.event
		f, err := r.js.PublishMsgAsync(msg, jetstream.WithMsgID(row.eventID))
		if err != nil {
			firstErr = err
			break
		}
		futures = append(futures, f)
		sent = append(sent, row)
	}
	acked, err := r.publishPlainly(ctx, plain)
	firstErr = cmp.Or(firstErr, err)
	// Acknowledgements are awaited until ctx ends (a shutdown's deadline,
	// or publishTimeout); what is not acknowledged by then is released and
	// published again later — JetStream drops the repeat of one that did
	// arrive.
	for i, f := range futures {
		select {
		case <-f.Ok():
			acked = append(acked, sent[i])
		case err := <-f.Err():
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				r.forgetStream(sent[i].subject) // deleted since it was found: ask again next time
			}
			firstErr = cmp.Or(firstErr, err)
		case <-ctx.Done():
			firstErr = cmp.Or(firstErr, ctx.Err())
		}
		if ctx.Err() != nil {
			break
		}
	}
	slices.SortFunc(acked, func(a, b outboxRow) int { return cmp.Compare(a.id, b.id) })
	return acked, firstErr
}

// publishPlainly publishes rows whose subject no stream covers: nothing
// acknowledges, so a flush that reached the server counts as sent.
func (r *Relay) publishPlainly(ctx context.Context, rows []outboxRow) ([]outboxRow, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	for _, row := range rows {
		msg := nats.NewMsg(row.subject)
		msg.Data = row.event
		msg.Header.Set(jetstream.MsgIDHeader, row.eventID)
		if err := r.conn.PublishMsg(msg); err != nil {
			return nil, err
		}
	}
	if err := r.conn.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	return rows, nil
}

// streamExists asks JetStream whether a stream captures subject. Asking
// first matters: publishing to a subject without a stream but with a core
// subscriber would wait for an acknowledgement that never comes.
func (r *Relay) streamExists(ctx context.Context, subject string) (bool, error) {
	r.streamMu.Lock()
	defer r.streamMu.Unlock()
	check := r.streams[subject]
	if check == nil {
		check = &streamCheck{}
		r.streams[subject] = check
	}
	if time.Since(check.checked) < streamCheckTTL {
		return check.found, nil
	}
	_, err := r.js.StreamNameBySubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		// No stream, or a server without JetStream at all.
		check.found = false
		if !check.logged {
			check.logged = true
			r.log.WarnContext(ctx, "no JetStream stream covers "+subject+"; publishing without acknowledgement")
		}
	case err != nil:
		return false, err
	default:
		check.found = true
	}
	check.checked = time.Now()
	return check.found, nil
}

func (r *Relay) forgetStream(subject string) {
	r.streamMu.Lock()
	defer r.streamMu.Unlock()
	if check := r.streams[subject]; check != nil {
		check.checked = time.Time{}
	}
}
