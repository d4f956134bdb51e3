package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/outbox"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Adoption is what an adoption found in an environment's namespaces: the
// volumes it recorded (or, validating only, would record), the labelled
// claims it left alone and why, the adopted ones to look at and why, and
// how many labelled claims a record serves already.
type Adoption struct {
	Namespaces []string
	Adopted    []Volume
	Skipped    []Skip
	Warnings   []Skip
	Recorded   int
}

// Skip is a labelled claim an adoption names, and why: one it left alone,
// or one it adopted that needs a look.
type Skip struct {
	Namespace, Name, Reason string
}

// Adopt records as volumes the claims labelled for DCM storage in the
// environment's namespaces (or only namespace) that no volume record serves
// — the claims of DCM's per-cluster storage provider, which labels its
// claims as the gateway does and names them by instance id — so they are
// served, followed and reported like the gateway's own. Each adopted
// volume's current status is recorded with its event in the transaction
// that records the volume, so DCM hears it once; the volumes are recorded
// all together or not at all, and a second adoption finds nothing left to
// adopt. validateOnly reports the same answer and records nothing.
//
// Adoption never happens implicitly: a labelled claim without a record is
// only counted (liveCounted), and a create that finds one refuses it.
//
// A claim another environment or installation made (its owner labels, or
// a gateway's display name without them) is that one's: it is skipped,
// naming its holder, unless takeOver says to take it (an environment
// registered again under a new id takes its old claims so). A claim
// taken over is labelled with the environment before it is recorded
// (labelOwner): it is no longer its former holder's, whose
// reconciler reports it DELETED there. Nothing else is written to the
// cluster: a claim adopted from DCM's storage SP stays as it is, served
// by the uid its record holds.
func (s *Service) Adopt(ctx context.Context, envID, namespace string, validateOnly, takeOver bool) (Adoption, error) {
	env, err := s.envs.Get(ctx, envID)
	if err != nil {
		return Adoption{}, err
	}
	namespaces := env.Spec.Namespaces()
	if namespace != "" {
		if !slices.Contains(namespaces, namespace) {
			return Adoption{}, fault.Invalid("namespace", "is not one of the environment's namespaces: %s", strings.Join(namespaces, ", "))
		}
		namespaces = []string{namespace}
	}
	cluster, lease, err := s.Readable(envID)
	if err != nil {
		return Adoption{}, err
	}
	candidates, out, _, err := s.adoptable(ctx, envID, cluster, namespaces, takeOver)
	if err != nil {
		return Adoption{}, err
	}
	recs := make([]record, len(candidates))
	now := time.Now()
	for i, pvc := range candidates {
		// The volume was created with its claim; it is recorded now.
		recs[i] = record{EnvironmentID: envID, ID: pvc.Name, Spec: specOf(pvc), PVCUID: string(pvc.UID), VolumeName: pvc.Spec.VolumeName,
			CreateTime: pvc.CreationTimestamp.UTC(), UpdateTime: now}
		if recs[i].CreateTime.IsZero() {
			recs[i].CreateTime = now
		}
		out.Adopted = append(out.Adopted, s.fromClaim(cluster, recs[i], pvc))
	}
	if validateOnly || len(recs) == 0 {
		return out, nil
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return Adoption{}, err
	}
	var takenOver []string
	for _, pvc := range candidates {
		if held := o.holderOf(pvc, pvc.Name, ""); held != heldElsewhere && held != heldUnlabelled {
			continue
		}
		takenOver = append(takenOver, pvc.Namespace+"/"+pvc.Name+" from "+o.heldBy(pvc))
		writeCtx, cancel := s.clusterWrite(ctx)
		err := s.labelOwner(writeCtx, cluster, o, pvc)
		cancel()
		if err != nil {
			return Adoption{}, kubernetesError(err, "label an adopted claim")
		}
	}
	if len(takenOver) > 0 {
		s.log.InfoContext(ctx, "claims taken over from their holder", "audit", true, "environment", envID, "claims", takenOver)
	}
	if err := s.recordAdopted(ctx, lease, envID, recs, out.Adopted); err != nil {
		return Adoption{}, err
	}
	if _, err := s.liveCounted(ctx, envID, cluster, lease); err != nil {
		s.log.WarnContext(ctx, "count the claims no volume record serves after an adoption", "environment", envID, "error", err)
	}
	s.log.InfoContext(ctx, "volumes adopted", "environment", envID, "count", len(out.Adopted), "skipped", len(out.Skipped))
	return out, nil
}

// adoptable sorts the labelled claims in namespaces that no record of
// envID serves into the ones an adoption takes and the ones it skips
// (with the reason); it counts the ones a record serves already, and
// returns envID's records it read, by volume id.
func (s *Service) adoptable(ctx context.Context, envID string, cluster clusters.Live, namespaces []string, takeOver bool) (
	[]*corev1.PersistentVolumeClaim, Adoption, map[string]recordedAs, error) {
	recorded, err := s.repo.namespaces(ctx, envID)
	if err != nil {
		return nil, Adoption{}, nil, err
	}
	unrecorded, out := triage(cluster.PVCs(), namespaces, recorded)
	ids := make([]string, len(unrecorded))
	for i, pvc := range unrecorded {
		ids[i] = pvc.Name
	}
	elsewhere, err := s.repo.elsewhere(ctx, envID, ids)
	if err != nil {
		return nil, Adoption{}, nil, err
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return nil, Adoption{}, nil, err
	}
	take, out := choose(cluster, o, takeOver, unrecorded, elsewhere, out)
	return take, out, recorded, nil
}

// triage sorts the storage claims in namespaces by what the environment's
// records (recorded, by volume id) say of them: served already (counted),
// recorded otherwise (skipped, with the reason), or unrecorded (returned).
func triage(pvcs []*corev1.PersistentVolumeClaim, namespaces []string, recorded map[string]recordedAs) ([]*corev1.PersistentVolumeClaim, Adoption) {
	out := Adoption{Namespaces: namespaces, Adopted: []Volume{}, Skipped: []Skip{}, Warnings: []Skip{}}
	var unrecorded []*corev1.PersistentVolumeClaim
	for _, pvc := range pvcs {
		if !slices.Contains(namespaces, pvc.Namespace) || !storageClaim(pvc) {
			continue // another namespace, or DCM's claim for another service
		}
		rec, known := recorded[pvc.Name]
		switch {
		case known && rec.deleted:
			out.Skipped = append(out.Skipped, Skip{pvc.Namespace, pvc.Name, "the environment's volume " + pvc.Name + " is recorded as deleted"})
		case known && rec.namespace == pvc.Namespace:
			out.Recorded++
		case known:
			out.Skipped = append(out.Skipped, Skip{pvc.Namespace, pvc.Name, "the environment's volume " + pvc.Name + " is recorded in namespace " + rec.namespace})
		default:
			unrecorded = append(unrecorded, pvc)
		}
	}
	return unrecorded, out
}

// choose takes the unrecorded claims an adoption by o can make volumes of
// and adds the others to out.Skipped: elsewhere names, by claim name,
// another environment recording a volume of that id; a claim another
// environment or installation made is taken only with takeOver. What is
// taken with a caveat (being deleted, its class gone) is in out.Warnings.
func choose(cluster clusters.Live, o owner, takeOver bool, unrecorded []*corev1.PersistentVolumeClaim, elsewhere map[string]string, out Adoption) ([]*corev1.PersistentVolumeClaim, Adoption) {
	seen := map[string]int{}
	for _, pvc := range unrecorded {
		seen[pvc.Name]++
	}
	var take []*corev1.PersistentVolumeClaim
	for _, pvc := range unrecorded {
		if seen[pvc.Name] > 1 {
			out.Skipped = append(out.Skipped, Skip{pvc.Namespace, pvc.Name,
				"claims of this name are in several of the environment's namespaces: a volume id names one (adopt one namespace's with --namespace)"})
			continue
		}
		if reason := unadoptable(pvc, elsewhere[pvc.Name]); reason != "" {
			out.Skipped = append(out.Skipped, Skip{pvc.Namespace, pvc.Name, reason})
			continue
		}
		if held := o.holderOf(pvc, pvc.Name, ""); !takeOver && (held == heldElsewhere || held == heldUnlabelled) {
			out.Skipped = append(out.Skipped, Skip{pvc.Namespace, pvc.Name,
				"it is held by " + o.heldBy(pvc) + "; adopting it takes it over from there (take_over)"})
			continue
		}
		// Adopted all the same, so that DCM's record of it ends: a claim
		// being deleted (DELETING now, DELETED once gone), and one whose
		// class is gone (served, never expanded).
		if pvc.DeletionTimestamp != nil {
			out.Warnings = append(out.Warnings, Skip{pvc.Namespace, pvc.Name,
				"it is being deleted: adopted as DELETING, its DELETED is reported once the claim is gone"})
		}
		if _, gone := cluster.ClassOf(pvc); gone {
			out.Warnings = append(out.Warnings, Skip{pvc.Namespace, pvc.Name, status.ClassGone(*pvc.Spec.StorageClassName)})
		}
		take = append(take, pvc)
	}
	return take, out
}

// unadoptable says why a labelled claim without a record cannot become a
// volume ("" if it can): otherEnv is an environment whose record holds its
// name as a volume id.
func unadoptable(pvc *corev1.PersistentVolumeClaim, otherEnv string) string {
	switch id := pvc.Labels[InstanceIDLabel]; {
	case id != pvc.Name:
		return fmt.Sprintf("its label %s is %q, not its name: a volume's claim is named by its id", InstanceIDLabel, id)
	case ValidateID(pvc.Name) != nil:
		return "its name is not a valid volume id (1-63 lowercase letters, digits or '-', not \"health\")"
	case otherEnv != "":
		return "a volume with this id is recorded in environment " + otherEnv
	}
	return ""
}

// recordAdopted records the adopted volumes (recs, as adopted shows them),
// each with its current status and that status's event, in one transaction
// fenced by the lease.
func (s *Service) recordAdopted(ctx context.Context, lease membership.Lease, envID string, recs []record, adopted []Volume) error {
	err := s.recorder.Outbox.Tx(ctx, func(tx outbox.Tx) error {
		if err := membership.Hold(ctx, tx, lease); err != nil {
			return err
		}
		for i, v := range adopted {
			if err := s.repo.insertAdopted(ctx, tx, recs[i], v); err != nil {
				return err
			}
			if _, err := s.recorder.RecordFirstTx(ctx, tx, lease, status.Observation{EnvironmentID: envID, VolumeID: v.ID,
				Status: v.Status, Message: v.Message, VolumeName: v.VolumeName}); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errExists):
		return fault.New(fault.Conflict, "a volume of environment %s was recorded while it was being adopted; adopt again", envID)
	case errors.Is(err, errNoEnvironment):
		return fault.New(fault.NotFound, "environment %q not found", envID)
	}
	return err
}

// insertAdopted records an adopted volume (rec, as v shows it): the
// caller's transaction holds the claim and records the first status after.
func (r *repository) insertAdopted(ctx context.Context, tx pgx.Tx, rec record, v Volume) error {
	_, err := tx.Exec(ctx, `INSERT INTO volumes (environment_id, id, namespace, spec, pvc_uid, status, status_message, volume_name, create_time, update_time)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		rec.EnvironmentID, rec.ID, rec.Spec.Namespace, mustJSON(rec.Spec), rec.PVCUID, string(v.Status), v.Message, rec.VolumeName,
		rec.CreateTime, rec.UpdateTime)
	switch postgres.ErrorCode(err) {
	case pgerrcode.UniqueViolation:
		return errExists
	case pgerrcode.ForeignKeyViolation:
		return errNoEnvironment
	}
	return err
}

// recordedAs is where a record keeps a volume: its namespace, and whether
// it is DELETED.
type recordedAs struct {
	namespace string
	deleted   bool
}

// namespaces returns, by volume id, where each record of env keeps it.
func (r *repository) namespaces(ctx context.Context, env string) (map[string]recordedAs, error) {
	rows, err := r.db.Query(ctx, `SELECT id, namespace, status = 'DELETED' FROM volumes WHERE environment_id = $1`, env)
	if err != nil {
		return nil, err
	}
	out := map[string]recordedAs{}
	var id string
	var at recordedAs
	_, err = pgx.ForEachRow(rows, []any{&id, &at.namespace, &at.deleted}, func() error {
		out[id] = at
		return nil
	})
	return out, err
}

// elsewhere returns, for each of ids that another environment's record
// holds as a volume id, one such environment.
func (r *repository) elsewhere(ctx context.Context, env string, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := r.db.Query(ctx, `SELECT DISTINCT ON (id) id, environment_id FROM volumes
		WHERE id = ANY($1) AND environment_id <> $2 ORDER BY id, environment_id`, ids, env)
	if err != nil {
		return nil, err
	}
	var id, other string
	_, err = pgx.ForEachRow(rows, []any{&id, &other}, func() error {
		out[id] = other
		return nil
	})
	return out, err
}

// liveCounted reads the environment's live records and records how many
// labelled claims in its namespaces none of them serves (the environment's
// status shows the count), returning the records: the reconciler settles
// them, so each pass reads them once. Only the owner counts, from its
// cache, fenced by its lease; a failed count is logged (the next pass
// counts again). Counts are made one at a time, each reading the records
// afresh, so one that read them before an adoption committed never
// overwrites the adoption's.
func (s *Service) liveCounted(ctx context.Context, envID string, cluster clusters.Live, lease membership.Lease) ([]record, error) {
	s.counted.Lock()
	defer s.counted.Unlock()
	recs, err := s.repo.live(ctx, envID)
	if err != nil {
		return nil, err
	}
	served := make(map[string]string, len(recs))
	for _, rec := range recs {
		served[rec.ID] = rec.Spec.Namespace
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, pvc := range cluster.PVCs() {
		if ns, ok := served[pvc.Name]; o.unserved(pvc) && (!ok || ns != pvc.Namespace) {
			n++
		}
	}
	// A quiet environment's zero is written once per lease: most passes
	// over a fleet write nothing. Other counts are written each time (a
	// deleted and re-registered environment starts with no row, so a
	// remembered count could hide it).
	if n == 0 && s.counted.zero[envID] == lease.Epoch {
		return recs, nil // counted
	}
	if err := s.repo.setUnadopted(ctx, envID, n, lease); err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "count the claims no volume record serves", "environment", envID, "error", err)
		}
		return recs, nil
	}
	if n == 0 {
		s.counted.zero[envID] = lease.Epoch
	} else {
		delete(s.counted.zero, envID)
	}
	return recs, nil
}

// setUnadopted stores env's count of unadopted claims while lease holds.
func (r *repository) setUnadopted(ctx context.Context, env string, count int, lease membership.Lease) error {
	_, err := r.db.Exec(ctx, `INSERT INTO unadopted_claims (environment_id, count)
		SELECT $1, $2 WHERE `+membership.FenceSQL("$1::text", "$3", "$4")+`
		ON CONFLICT (environment_id) DO UPDATE SET count = EXCLUDED.count, count_time = now()
		WHERE unadopted_claims.count <> EXCLUDED.count`, env, count, lease.Epoch, lease.Incarnation)
	if postgres.ErrorCode(err) == pgerrcode.ForeignKeyViolation {
		return nil // the environment was deleted meanwhile
	}
	return err
}

// Served says which of ids environment envID serves — a live volume
// record — and which an adoption would take: a valid labelled claim in one
// of its namespaces (from the owner's cache), by the rules Adopt follows.
// DCM's instances of its provider in neither set are ones it would answer
// 404 for.
func (s *Service) Served(ctx context.Context, envID string, ids []string) (recorded, adoptable map[string]bool, err error) {
	env, err := s.envs.Get(ctx, envID)
	if err != nil {
		return nil, nil, err
	}
	cluster, _, err := s.Readable(envID)
	if err != nil {
		return nil, nil, err
	}
	take, _, records, err := s.adoptable(ctx, envID, cluster, env.Spec.Namespaces(), false)
	if err != nil {
		return nil, nil, err
	}
	wanted := make(map[string]bool, len(ids))
	for _, id := range ids {
		wanted[id] = true
	}
	recorded, adoptable = map[string]bool{}, map[string]bool{}
	for id, rec := range records {
		if wanted[id] && !rec.deleted {
			recorded[id] = true
		}
	}
	for _, pvc := range take {
		if wanted[pvc.Name] {
			adoptable[pvc.Name] = true
		}
	}
	return recorded, adoptable, nil
}

// RepeatStatus queues the volume's reported status again unless heard,
// DCM's record of it, says it already (status.Recorder.Repeat).
func (s *Service) RepeatStatus(ctx context.Context, envID, volumeID, heard string) (bool, error) {
	return s.recorder.Repeat(ctx, envID, volumeID, status.Status(heard))
}
