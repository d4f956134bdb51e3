package environments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/paging"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// errExists reports an insert whose id is taken.
var errExists = errors.New("environment id exists")

// errNotFound reports a missing row.
var errNotFound = errors.New("environment not found")

// record is one row: the public Environment plus what never leaves the
// package — the CA bytes and the sealed credentials.
type record struct {
	Environment
	caData []byte
	sealed secrets.Sealed
	// registeredBy is the subject that registered the environment.
	registeredBy string
}

// repository reads and writes the environments table. Every method takes the
// pool explicitly through the struct; transactions stay inside one method.
type repository struct{ db *pgxpool.Pool }

// specColumns are a Spec's columns, in specRow's order.
const specColumns = `e.display_name, e.description, e.labels, e.region, e.zone, e.namespace,
	e.allowed_namespaces, e.defaults, e.dcm, e.capability_overrides, e.share_namespaces`

const selectColumns = `
	e.id, ` + specColumns + `, e.create_time, e.update_time,
	e.server, e.certificate_authority, e.tls_server_name, e.insecure_skip_verify,
	e.auth_type, e.credentials_key_id, e.credentials, e.credentials_update_time, e.credentials_expire_time,
	e.state, e.status_message, e.kubernetes_version, e.storage_class_count,
	e.last_probe_time, e.last_ready_time, e.dcm_registration, e.generation,
	e.credentials_generation, e.registered_by, e.cluster_id,
	(SELECT count(*) FROM volumes v WHERE v.environment_id = e.id AND v.status <> 'DELETED'),
	COALESCE((SELECT u.count FROM unadopted_claims u WHERE u.environment_id = e.id), 0)`

// specRow receives specColumns into spec; decode then fills its jsonb
// fields.
type specRow struct {
	spec                             *Spec
	labels, defaults, dcm, overrides []byte
}

func (r *specRow) targets() []any {
	s := r.spec
	return []any{&s.DisplayName, &s.Description, &r.labels, &s.Region, &s.Zone, &s.Namespace,
		&s.AllowedNamespaces, &r.defaults, &r.dcm, &r.overrides, &s.ShareNamespaces}
}

func (r *specRow) columns() []jsonColumn {
	return []jsonColumn{{r.labels, &r.spec.Labels}, {r.defaults, &r.spec.Defaults}, {r.dcm, &r.spec.DCM}, {r.overrides, &r.spec.CapabilityOverrides}}
}

func scanRecord(row pgx.Row) (record, error) {
	var r record
	spec := specRow{spec: &r.Spec}
	var reg []byte
	var state string
	targets := append(append([]any{&r.ID}, spec.targets()...), &r.CreateTime, &r.UpdateTime,
		&r.Connection.Server, &r.caData, &r.Connection.TLSServerName, &r.Connection.Insecure,
		&r.Connection.AuthType, &r.sealed.KeyID, &r.sealed.Blob, &r.Connection.CredentialsUpdateTime, &r.Connection.CredentialsExpireTime,
		&state, &r.Status.Message, &r.Status.KubernetesVersion, &r.Status.StorageClassCount,
		&r.Status.LastProbeTime, &r.Status.LastReadyTime, &reg, &r.generation,
		&r.sealed.Generation, &r.registeredBy, &r.Status.ClusterID,
		&r.Status.VolumeCount, &r.Status.UnadoptedVolumeCount,
	)
	err := row.Scan(targets...)
	if errors.Is(err, pgx.ErrNoRows) {
		return record{}, errNotFound
	}
	if err != nil {
		return record{}, err
	}
	r.Status.State = State(state)
	r.Connection.KeyID = r.sealed.KeyID
	r.Connection.CASHA256 = kubeconfig.Connection{CAData: r.caData}.CASHA256()
	if err := decodeColumns(r.ID, append(spec.columns(), jsonColumn{reg, &r.Status.DCMRegistration})...); err != nil {
		return record{}, err
	}
	return r, nil
}

// jsonColumn is a jsonb column as read (raw) and where it decodes to.
type jsonColumn struct {
	raw []byte
	dst any
}

// decodeColumns decodes environment id's jsonb columns.
func decodeColumns(id string, columns ...jsonColumn) error {
	for _, c := range columns {
		if err := json.Unmarshal(c.raw, c.dst); err != nil {
			return fmt.Errorf("decode environment %s: %w", id, err)
		}
	}
	return nil
}

func (r *repository) get(ctx context.Context, id string) (record, error) {
	return scanRecord(r.db.QueryRow(ctx, `SELECT `+selectColumns+` FROM environments e WHERE e.id = $1`, id))
}

// probeStatus reads what decides when an environment is probed next: its
// state and last probe time.
func (r *repository) probeStatus(ctx context.Context, id string) (Status, error) {
	var st Status
	var state string
	err := r.db.QueryRow(ctx, `SELECT state, last_probe_time FROM environments WHERE id = $1`, id).Scan(&state, &st.LastProbeTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{}, errNotFound
	}
	st.State = State(state)
	return st, err
}

// getSpec reads an environment's spec alone (see Service.Spec).
func (r *repository) getSpec(ctx context.Context, id string) (VersionedSpec, error) {
	var v VersionedSpec
	row := specRow{spec: &v.Spec}
	err := r.db.QueryRow(ctx, `SELECT `+specColumns+`, e.generation FROM environments e WHERE e.id = $1`, id).
		Scan(append(row.targets(), &v.Generation)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return VersionedSpec{}, errNotFound
	}
	if err != nil {
		return VersionedSpec{}, err
	}
	return v, decodeColumns(id, row.columns()...)
}

func (r *repository) atGeneration(ctx context.Context, id string, generation int64) (bool, error) {
	var current bool
	err := r.db.QueryRow(ctx, `SELECT `+GenerationSQL("$1", "$2"), id, generation).Scan(&current)
	return current, err
}

// insert adds rec's row and returns it as stored, as get would read it:
// the registration answers with it without reading it again.
// It is refused with admit's error when admit refuses the environments
// on rec's cluster as the insert's transaction sees them (see onCluster).
func (r *repository) insert(ctx context.Context, rec record, admit func([]neighbour) error) (record, error) {
	labels, defaults, dcm := mustJSON(rec.Spec.Labels), mustJSON(rec.Spec.Defaults), mustJSON(rec.Spec.DCM)
	var stored record
	err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		if err := onCluster(ctx, tx, rec, admit); err != nil {
			return err
		}
		var err error
		stored, err = scanRecord(tx.QueryRow(ctx, `
		INSERT INTO environments AS e (
			id, display_name, description, labels, region, zone, namespace, allowed_namespaces,
			defaults, dcm, server, certificate_authority, tls_server_name, insecure_skip_verify,
			auth_type, credentials_key_id, credentials, credentials_update_time,
			state, status_message, kubernetes_version, storage_class_count, last_probe_time, last_ready_time,
			create_time, update_time, capability_overrides, credentials_generation, registered_by, credentials_expire_time,
			share_namespaces, cluster_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
			$19, $20, $21, $22, $23, $24, $18, $18, $25, $26, $27, $28, $29, $30)
		RETURNING `+selectColumns,
			rec.ID, rec.Spec.DisplayName, rec.Spec.Description, labels, rec.Spec.Region, rec.Spec.Zone,
			rec.Spec.Namespace, rec.Spec.AllowedNamespaces, defaults, dcm,
			rec.Connection.Server, rec.caData, rec.Connection.TLSServerName, rec.Connection.Insecure,
			rec.Connection.AuthType, rec.sealed.KeyID, rec.sealed.Blob, rec.Connection.CredentialsUpdateTime,
			string(rec.Status.State), rec.Status.Message, rec.Status.KubernetesVersion, rec.Status.StorageClassCount,
			rec.Status.LastProbeTime, rec.Status.LastReadyTime, mustJSON(rec.Spec.CapabilityOverrides),
			rec.sealed.Generation, rec.registeredBy, rec.Connection.CredentialsExpireTime,
			rec.Spec.ShareNamespaces, rec.Status.ClusterID))
		return err
	})
	if postgres.ErrorCode(err) == pgerrcode.UniqueViolation {
		return record{}, errExists
	}
	return stored, err
}

// update writes a PATCH if the row is still at the generation the caller
// read; it reports false when someone else won. The spec is always written;
// connection and sealed credentials only when rotated, status only when the
// PATCH probed — so a concurrent re-seal (keys rewrap) or probe result is
// never overwritten with what this PATCH read earlier.
//
// A non-nil admit refuses the update with its error when it refuses the
// environments on rec's cluster (see onCluster).
func (r *repository) update(ctx context.Context, rec record, rotated, probed bool, admit func([]neighbour) error) (bool, error) {
	labels, defaults, dcm := mustJSON(rec.Spec.Labels), mustJSON(rec.Spec.Defaults), mustJSON(rec.Spec.DCM)
	var updated bool
	err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		if err := onCluster(ctx, tx, rec, admit); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
		UPDATE environments SET
			display_name = $3, description = $4, labels = $5, region = $6, zone = $7, namespace = $8,
			allowed_namespaces = $9, defaults = $10, dcm = $11, capability_overrides = $28, share_namespaces = $31,
			server                  = CASE WHEN $26 THEN $12 ELSE server END,
			certificate_authority   = CASE WHEN $26 THEN $13 ELSE certificate_authority END,
			tls_server_name         = CASE WHEN $26 THEN $14 ELSE tls_server_name END,
			insecure_skip_verify    = CASE WHEN $26 THEN $15 ELSE insecure_skip_verify END,
			auth_type               = CASE WHEN $26 THEN $16 ELSE auth_type END,
			credentials_key_id      = CASE WHEN $26 THEN $17 ELSE credentials_key_id END,
			credentials             = CASE WHEN $26 THEN $18 ELSE credentials END,
			credentials_generation  = CASE WHEN $26 THEN $29 ELSE credentials_generation END,
			credentials_update_time = CASE WHEN $26 THEN $19 ELSE credentials_update_time END,
			credentials_expire_time = CASE WHEN $26 THEN $30 ELSE credentials_expire_time END,
			state                   = CASE WHEN $27 THEN $20 ELSE state END,
			status_message          = CASE WHEN $27 THEN $21 ELSE status_message END,
			kubernetes_version      = CASE WHEN $27 THEN $22 ELSE kubernetes_version END,
			storage_class_count     = CASE WHEN $27 THEN $23 ELSE storage_class_count END,
			last_probe_time         = CASE WHEN $27 THEN $24 ELSE last_probe_time END,
			last_ready_time         = CASE WHEN $27 THEN $25 ELSE last_ready_time END,
			cluster_id              = CASE WHEN $27 THEN $32 ELSE cluster_id END,
			update_time = now(), generation = generation + 1
		WHERE id = $1 AND generation = $2`,
			rec.ID, rec.generation, rec.Spec.DisplayName, rec.Spec.Description, labels, rec.Spec.Region, rec.Spec.Zone,
			rec.Spec.Namespace, rec.Spec.AllowedNamespaces, defaults, dcm, rec.Connection.Server, rec.caData,
			rec.Connection.TLSServerName, rec.Connection.Insecure, rec.Connection.AuthType, rec.sealed.KeyID,
			rec.sealed.Blob, rec.Connection.CredentialsUpdateTime, string(rec.Status.State), rec.Status.Message,
			rec.Status.KubernetesVersion, rec.Status.StorageClassCount, rec.Status.LastProbeTime, rec.Status.LastReadyTime,
			rotated, probed, mustJSON(rec.Spec.CapabilityOverrides), rec.sealed.Generation, rec.Connection.CredentialsExpireTime,
			rec.Spec.ShareNamespaces, rec.Status.ClusterID)
		updated = err == nil && tag.RowsAffected() == 1
		return err
	})
	return updated, err
}

// neighbour is another environment on the same cluster: its id and the
// namespaces it serves.
type neighbour struct {
	ID         string
	Namespaces []string
}

// onCluster hands admit the other environments recorded on rec's cluster
// (by its identity, Status.ClusterID), under a transaction lock on that
// identity held to the caller's commit: two registrations on one cluster
// are decided one after the other, each seeing the other's row.
func onCluster(ctx context.Context, tx pgx.Tx, rec record, admit func([]neighbour) error) error {
	if rec.Status.ClusterID == "" || admit == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('environments.cluster_id:' || $1, 0))`, rec.Status.ClusterID); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `SELECT id, namespace, allowed_namespaces FROM environments
		WHERE cluster_id = $1 AND id <> $2 ORDER BY id`, rec.Status.ClusterID, rec.ID)
	if err != nil {
		return err
	}
	var others []neighbour
	var n neighbour
	var ns string
	var allowed []string
	if _, err := pgx.ForEachRow(rows, []any{&n.ID, &ns, &allowed}, func() error {
		others = append(others, neighbour{ID: n.ID, Namespaces: append([]string{ns}, allowed...)})
		return nil
	}); err != nil {
		return err
	}
	return admit(others)
}

// credentialsGeneration reads the generation of an environment's stored
// credentials.
func (r *repository) credentialsGeneration(ctx context.Context, id string) (int64, error) {
	var gen int64
	err := r.db.QueryRow(ctx, `SELECT credentials_generation FROM environments WHERE id = $1`, id).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errNotFound
	}
	return gen, err
}

// nextGeneration draws a credential generation: unique across every row
// and every seal, ever (see secrets.Sealed).
func (r *repository) nextGeneration(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var gen int64
	err := q.QueryRow(ctx, `SELECT nextval('credentials_generation_seq')`).Scan(&gen)
	return gen, err
}

// updateStatus records a probe result unless the environment changed since
// the probe's generation (its result would describe stale settings), and,
// for a probe the owner ran on its own (claim set), unless its claim is no
// longer current.
// A credentials expiry is recorded only where none is yet (credentials
// stored before the gateway read expiries).
func (r *repository) updateStatus(ctx context.Context, id string, generation int64, st Status, expiry *time.Time, lease *membership.Lease) (bool, error) {
	query := `
		UPDATE environments SET state = $3, status_message = $4, kubernetes_version = $5,
			storage_class_count = $6, last_probe_time = $7, last_ready_time = $8,
			credentials_expire_time = COALESCE(credentials_expire_time, $9), cluster_id = $10
		WHERE id = $1 AND generation = $2`
	args := []any{id, generation, string(st.State), st.Message, st.KubernetesVersion, st.StorageClassCount,
		st.LastProbeTime, st.LastReadyTime, expiry, st.ClusterID}
	if lease != nil {
		query += ` AND ` + membership.FenceSQL("environments.id", "$11", "$12")
		args = append(args, lease.Epoch, lease.Incarnation)
	}
	tag, err := r.db.Exec(ctx, query, args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// recordRegistration stores the DCM registration's state while claim is
// current; false says it was not (the environment is gone, or another
// replica owns it now and registers it itself).
func (r *repository) recordRegistration(ctx context.Context, id string, reg DCMRegistration, lease membership.Lease) (bool, error) {
	tag, err := r.db.Exec(ctx, `UPDATE environments SET dcm_registration = $2 WHERE id = $1 AND `+
		membership.FenceSQL("environments.id", "$3", "$4"), id, mustJSON(reg), lease.Epoch, lease.Incarnation)
	return tag.RowsAffected() == 1, err
}

// volumesIn counts live volumes of an environment in the given namespaces.
func (r *repository) volumesIn(ctx context.Context, id string, namespaces []string) (int, error) {
	var n int
	err := r.db.QueryRow(ctx, `SELECT count(*) FROM volumes
		WHERE environment_id = $1 AND namespace = ANY($2) AND status <> 'DELETED'`, id, namespaces).Scan(&n)
	return n, err
}

// recordReachability applies a pool health change (see Service.RecordHealth)
// while the owner's claim is current.
func (r *repository) recordReachability(ctx context.Context, id string, state State, msg string, at time.Time, lease membership.Lease) (bool, error) {
	tag, err := r.db.Exec(ctx, `
		UPDATE environments SET state = $2, status_message = $3, last_probe_time = $4,
			last_ready_time = CASE WHEN $2 = 'READY' THEN $4 ELSE last_ready_time END
		WHERE id = $1 AND state <> $2
		  AND ($2 = 'UNREACHABLE' OR state IN ('UNREACHABLE', 'PENDING'))
		  AND `+membership.FenceSQL("environments.id", "$5", "$6"),
		id, string(state), msg, at, lease.Epoch, lease.Incarnation)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// delete removes the environment. Unless force is set it refuses while volume
// records exist; the lock on the environment's row blocks volume inserts (their
// foreign key needs a share lock on it), so the count cannot go stale before the
// delete. It returns the DCM registration the row held when it was locked, for
// deregistering. The owner row, which the cascade deletes too, is locked
// first, in the order fenced writes lock them (membership.LockOwnerSQL).
func (r *repository) delete(ctx context.Context, id string, force bool) (volumes int, reg DCMRegistration, err error) {
	err = pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, membership.LockOwnerSQL("$1"), id); err != nil {
			return err
		}
		var raw []byte
		if err := tx.QueryRow(ctx, `SELECT dcm_registration FROM environments WHERE id = $1 FOR UPDATE`, id).Scan(&raw); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errNotFound
			}
			return err
		}
		if err := json.Unmarshal(raw, &reg); err != nil {
			return fmt.Errorf("decode environment %s: %w", id, err)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM volumes WHERE environment_id = $1 AND status <> 'DELETED'`, id).Scan(&volumes); err != nil {
			return err
		}
		if volumes > 0 && !force {
			return nil
		}
		_, err := tx.Exec(ctx, `DELETE FROM environments WHERE id = $1`, id)
		return err
	})
	return volumes, reg, err
}

// firstMissing returns the first of ids that is not a registered
// environment, or "".
func (r *repository) firstMissing(ctx context.Context, ids []string) (string, error) {
	var missing string
	err := r.db.QueryRow(ctx, `SELECT id FROM unnest($1::text[]) WITH ORDINALITY AS requested(id, n)
		WHERE NOT EXISTS (SELECT 1 FROM environments e WHERE e.id = requested.id) ORDER BY n LIMIT 1`, ids).Scan(&missing)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return missing, err
}

// listFilter is a validated ListQuery in SQL terms.
type listFilter struct {
	ids    []string // nil: every environment
	labels []labelTerm
	region string
	state  string
	after  string
	limit  int
}

// labelTerm is one requirement of a label selector: the label key is (not)
// one of values, or exists (or not) when values is nil.
type labelTerm struct {
	key    string
	values []string
	negate bool
}

func (r *repository) list(ctx context.Context, f listFilter) ([]record, error) {
	args := []any{f.region, f.state, f.after, f.limit, f.ids}
	where := `($1 = '' OR e.region = $1) AND ($2 = '' OR e.state = $2) AND e.id > $3
		  AND ($5::text[] IS NULL OR e.id = ANY($5))`
	for _, term := range f.labels {
		args = append(args, term.key)
		key := fmt.Sprintf("$%d", len(args))
		cond := "jsonb_exists(e.labels, " + key + ")"
		if term.values != nil {
			args = append(args, term.values)
			cond = fmt.Sprintf("coalesce(e.labels->>%s = ANY($%d), false)", key, len(args))
		}
		if term.negate {
			cond = "NOT " + cond
		}
		where += " AND " + cond
	}
	rows, err := r.db.Query(ctx, `SELECT `+selectColumns+` FROM environments e WHERE `+where+` ORDER BY e.id LIMIT $4`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (record, error) { return scanRecord(row) })
}

// each calls fn for every environment, in id order, a page at a time; it
// stops at fn's first error.
func (r *repository) each(ctx context.Context, fn func(record) error) error {
	f := listFilter{limit: paging.MaxSize}
	for {
		recs, err := r.list(ctx, f)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err := fn(rec); err != nil {
				return err
			}
		}
		if len(recs) < f.limit {
			return nil
		}
		f.after = recs[len(recs)-1].ID
	}
}

// ids lists every environment's id, reading nothing else (a reconciler's
// start needs no row, let alone its sealed credentials).
func (r *repository) ids(ctx context.Context) ([]string, error) {
	rows, err := r.db.Query(ctx, `SELECT id FROM environments ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// eachCredential calls fn with every environment's sealed credentials, in
// id order, stopping at fn's first error.
func (r *repository) eachCredential(ctx context.Context, fn func(id string, sealed secrets.Sealed) error) error {
	rows, err := r.db.Query(ctx, `SELECT id, credentials_key_id, credentials_generation, credentials FROM environments ORDER BY id`)
	if postgres.ErrorCode(err) == pgerrcode.UndefinedColumn {
		// A schema from before credential generations (not migrated yet):
		// every credential is of the legacy format, generation 0.
		rows, err = r.db.Query(ctx, `SELECT id, credentials_key_id, 0::bigint, credentials FROM environments ORDER BY id`)
	}
	if code := postgres.ErrorCode(err); code == pgerrcode.UndefinedTable || code == pgerrcode.UndefinedColumn {
		// The schema predates sealed credentials: there is nothing to open.
		return nil
	}
	if err != nil {
		return err
	}
	var id string
	var sealed secrets.Sealed
	_, err = pgx.ForEachRow(rows, []any{&id, &sealed.KeyID, &sealed.Generation, &sealed.Blob}, func() error {
		return fn(id, sealed)
	})
	return err
}

// resealBatch re-seals, with the given function and a new generation, up to
// limit rows after the id after that are sealed in the legacy format or
// (unless legacyOnly) not under primary, in one transaction that skips rows
// other writers hold. A row reseal refuses is left as it is and named in
// skipped, so one damaged row never holds up the others. It returns the
// last id it looked at ("" when there was none).
func (r *repository) resealBatch(ctx context.Context, primary string, legacyOnly bool, after string, limit int,
	reseal func(id string, s secrets.Sealed, generation int64) (secrets.Sealed, error)) (n int, last string, skipped []string, _ error) {
	err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, credentials_key_id, credentials_generation, credentials FROM environments
			WHERE (credentials_generation = 0 OR (NOT $3 AND credentials_key_id <> $1)) AND id > $4
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, primary, limit, legacyOnly, after)
		if err != nil {
			return err
		}
		type row struct {
			id     string
			sealed secrets.Sealed
		}
		var batch []row
		var one row
		if _, err := pgx.ForEachRow(rows, []any{&one.id, &one.sealed.KeyID, &one.sealed.Generation, &one.sealed.Blob}, func() error {
			// pgx may reuse the scan buffer between rows.
			batch = append(batch, row{id: one.id, sealed: secrets.Sealed{KeyID: one.sealed.KeyID,
				Generation: one.sealed.Generation, Blob: bytes.Clone(one.sealed.Blob)}})
			return nil
		}); err != nil {
			return err
		}
		// One round trip for the batch's generations, not one per row.
		gens, err := tx.Query(ctx, `SELECT nextval('credentials_generation_seq') FROM generate_series(1, $1)`, len(batch))
		if err != nil {
			return err
		}
		generations, err := pgx.CollectRows(gens, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for i, b := range batch {
			last = b.id
			fresh, err := reseal(b.id, b.sealed, generations[i])
			if err != nil {
				skipped = append(skipped, b.id)
				continue
			}
			// generation moves too, so a PATCH that read the row before
			// this re-seal cannot write its own (older) seal over it.
			if _, err := tx.Exec(ctx, `UPDATE environments SET credentials_key_id = $2, credentials = $3,
				credentials_generation = $4, generation = generation + 1 WHERE id = $1`,
				b.id, fresh.KeyID, fresh.Blob, fresh.Generation); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, last, skipped, err
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("environments: marshal %T: %v", v, err)) // only plain structs and maps reach here
	}
	return b
}

// now is the repository's notion of time for rows it writes, truncated to
// what Postgres stores so values read back compare equal.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
