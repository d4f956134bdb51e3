package volumes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/paging"
	"github.com/dcm-project/storage-gateway/internal/status"
)

// Get returns one volume from the records and the cluster cache.
func (s *Service) Get(ctx context.Context, envID, id string) (Volume, error) {
	if err := s.envs.Exists(ctx, envID); err != nil {
		return Volume{}, err
	}
	rec, err := s.live(ctx, envID, id)
	if err != nil {
		return Volume{}, err
	}
	cluster, _, err := s.Readable(envID)
	if err != nil {
		return Volume{}, err
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return Volume{}, err
	}
	return s.view(cluster, o, rec)
}

// live returns a volume's record unless the volume is unknown or gone.
func (s *Service) live(ctx context.Context, envID, id string) (record, error) {
	rec, err := s.repo.get(ctx, envID, id)
	if errors.Is(err, errNotFound) || err == nil && rec.Status == status.Deleted {
		return record{}, fault.New(fault.NotFound, "volume %s not found in environment %s", id, envID)
	}
	return rec, err
}

// view merges a record of o with its cached claim.
func (s *Service) view(cluster clusters.Live, o owner, rec record) (Volume, error) {
	if pvc, ok := ownClaim(cluster, o, rec); ok {
		return s.fromClaim(cluster, rec, pvc), nil
	}
	if claimGone(cluster, o, rec) {
		return Volume{}, fault.New(fault.NotFound, "volume %s was deleted", rec.ID)
	}
	return fromRecord(rec), nil
}

// ownClaim returns the cached claim of rec's name if it is o's (see
// owner.holderOf): a claim of the same name another environment or
// provider holds is never shown, changed or deleted as o's volume.
func ownClaim(cluster clusters.Live, o owner, rec record) (*corev1.PersistentVolumeClaim, bool) {
	pvc, ok := cluster.PVC(rec.Spec.Namespace, rec.ID)
	if !ok || o.holderOf(pvc, rec.ID, rec.PVCUID) != heldHere {
		return nil, false
	}
	return pvc, true
}

// claimGone reports a volume whose claim existed and is no longer in the
// (synced) cache — deleted through the API, or behind the gateway's back —
// or whose name another's claim holds now. It is not found any more, even
// before the reconciler records it as DELETED. A claim created moments ago
// may not be cached yet, hence the settle time.
func claimGone(cluster clusters.Live, o owner, rec record) bool {
	if _, own := ownClaim(cluster, o, rec); own {
		return false
	}
	return rec.Status == status.Deleting || rec.PVCUID != "" && time.Since(rec.UpdateTime) > cacheLag
}

// Page is one page of volumes.
type Page struct {
	Volumes       []Volume
	NextPageToken string
}

// List returns volumes in id order; the page token is the last id, opaque
// to clients.
func (s *Service) List(ctx context.Context, envID string, maxPageSize int, pageToken string) (Page, error) {
	if err := s.envs.Exists(ctx, envID); err != nil {
		return Page{}, err
	}
	size, err := paging.Size(maxPageSize)
	if err != nil {
		return Page{}, err
	}
	after, err := paging.After(pageToken, envID)
	if err != nil {
		return Page{}, err
	}
	cluster, _, err := s.Readable(envID)
	if err != nil {
		return Page{}, err
	}
	recs, err := s.repo.list(ctx, envID, after, size+1)
	if err != nil {
		return Page{}, err
	}
	var page Page
	recs, page.NextPageToken = paging.Cut(recs, size, func(r record) string { return r.ID }, envID)
	o, err := s.owner(ctx, envID)
	if err != nil {
		return Page{}, err
	}
	for _, rec := range recs {
		if v, err := s.view(cluster, o, rec); err == nil {
			page.Volumes = append(page.Volumes, v)
		}
	}
	return page, nil
}

// Expand grows a volume's claim. Only growth on an expandable class is
// accepted; the API server's quota admission decides the rest.
func (s *Service) Expand(ctx context.Context, envID, id, capacity string) (Volume, error) {
	want, err := ParseCapacity("capacity", capacity)
	if err != nil {
		return Volume{}, err
	}
	rec, cluster, lease, pvc, err := s.claimToChange(ctx, envID, id, "expand")
	if err != nil {
		return Volume{}, err
	}
	class, gone := cluster.ClassOf(pvc)
	if gone {
		return Volume{}, &fault.Error{Kind: fault.FailedPrecondition, Field: "capacity",
			Detail: fmt.Sprintf("volume %s cannot be expanded: %s", id, status.ClassGone(*pvc.Spec.StorageClassName))}
	}
	if err := Bound(pvc, "expand"); err != nil {
		return Volume{}, err
	}
	if class == nil || class.AllowVolumeExpansion == nil || !*class.AllowVolumeExpansion {
		return Volume{}, &fault.Error{Kind: fault.FailedPrecondition, Field: "capacity",
			Detail: fmt.Sprintf("storage class %s does not allow volume expansion", rec.Spec.StorageClass)}
	}
	current := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if want.Cmp(current) <= 0 {
		return Volume{}, fault.Invalid("capacity", "must be larger than the current %s", current.String())
	}
	patch := fmt.Appendf(nil, `{"spec":{"resources":{"requests":{"storage":%q}}}}`, want.String())
	writeCtx, cancel := s.clusterWrite(ctx)
	defer cancel()
	patched, err := cluster.Client().PersistentVolumeClaims(rec.Spec.Namespace).Patch(writeCtx, id, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return Volume{}, kubernetesError(err, "expand the claim")
	}
	if rec.UpdateTime, err = s.repo.setCapacity(ctx, envID, id, want.String(), lease); err != nil {
		// The claim was patched; the record only lags behind it.
		s.log.WarnContext(ctx, "record an expansion", "environment", envID, "volume", id, "error", err)
	}
	rec.Spec.Capacity = want.String()
	cluster.StorageRequested()
	s.log.InfoContext(ctx, "volume expansion requested", "environment", envID, "volume", id, "capacity", want.String())
	return s.fromClaim(cluster, rec, patched), nil
}

// claimToChange returns what a change to a live volume's claim needs (to
// "expand" it, say): its record, the cluster writes can reach now, this
// replica's lease and the claim from the cache. A claim not there yet or
// being deleted is a conflict.
func (s *Service) claimToChange(ctx context.Context, envID, id, change string) (record, clusters.Live, membership.Lease, *corev1.PersistentVolumeClaim, error) {
	var lease membership.Lease
	if err := s.envs.Exists(ctx, envID); err != nil {
		return record{}, nil, lease, nil, err
	}
	rec, err := s.live(ctx, envID, id)
	if err != nil {
		return record{}, nil, lease, nil, err
	}
	cluster, lease, err := s.Writable(envID)
	if err != nil {
		return record{}, nil, lease, nil, err
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return record{}, nil, lease, nil, err
	}
	pvc, ok := ownClaim(cluster, o, rec)
	if !ok || pvc.DeletionTimestamp != nil {
		return record{}, nil, lease, nil, NoClaim(id, change)
	}
	return rec, cluster, lease, pvc, nil
}

// NoClaim refuses a change to volume id whose claim is not in the cache
// (not created yet) or is being deleted.
func NoClaim(id, change string) error {
	return fault.New(fault.Conflict, "volume %s has no claim to %s (still being created, or deleted)", id, change)
}

// Bound refuses a change to a claim not bound to a volume yet.
func Bound(pvc *corev1.PersistentVolumeClaim, change string) error {
	if pvc.Status.Phase != corev1.ClaimBound {
		return fault.New(fault.Conflict, "volume %s is not bound to a volume yet; %s it once it is RUNNING", pvc.Name, change)
	}
	return nil
}

// Delete deletes a volume's claim. Unknown or finished volumes are
// NotFound, which DCM treats as success; a deletion under way is accepted
// again.
func (s *Service) Delete(ctx context.Context, envID, id string) error {
	if err := s.envs.Exists(ctx, envID); err != nil {
		return err
	}
	rec, err := s.live(ctx, envID, id)
	if err != nil {
		return err
	}
	cluster, lease, err := s.Writable(envID)
	if err != nil {
		return err
	}
	o, err := s.owner(ctx, envID)
	if err != nil {
		return err
	}
	if claimGone(cluster, o, rec) {
		return fault.New(fault.NotFound, "volume %s was deleted", id)
	}
	// Only the environment's own claim is deleted: the one in the cache,
	// by its uid (a claim of the name made since is another's). None in
	// the cache yet (a create under way) deletes whatever of the name the
	// create makes; the reconciler deletes one made after this.
	opts := metav1.DeleteOptions{}
	pvc, cached := ownClaim(cluster, o, rec)
	if cached {
		opts.Preconditions = &metav1.Preconditions{UID: &pvc.UID}
	} else if _, taken := cluster.PVC(rec.Spec.Namespace, id); taken {
		return fault.New(fault.NotFound, "volume %s has no claim: the claim of its name is not the environment's", id)
	}
	writeCtx, cancel := s.clusterWrite(ctx)
	defer cancel()
	err = cluster.Client().PersistentVolumeClaims(rec.Spec.Namespace).Delete(writeCtx, id, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		return kubernetesError(err, "delete the claim")
	}
	if err := s.recorder.Record(ctx, lease, status.Observation{EnvironmentID: envID, VolumeID: id,
		Status: status.Deleting, Message: "the claim is being deleted"}); err != nil {
		return err
	}
	cluster.StorageRequested()
	s.log.InfoContext(ctx, "volume deletion requested", "environment", envID, "volume", id)
	return nil
}

// Health is an environment's health as DCM polls it: healthy when the
// registry's last probe says READY or DEGRADED and the pool's connection
// says READY. It reads cached state only and never waits for the cluster.
func (s *Service) Health(ctx context.Context, envID string) (healthy bool, message string, err error) {
	env, err := s.envs.Get(ctx, envID)
	if err != nil {
		return false, "", err
	}
	cluster, connected := s.clusters.Live(envID)
	healthy, message = healthOf(env.Status, cluster, connected)
	return healthy, message, nil
}

// healthOf is the health of an environment whose last probe recorded st
// and whose live cluster, if connected, is cluster. DEGRADED serves
// (credentials about to expire, say): DCM hears the warning in the
// message, not an outage.
func healthOf(st environments.Status, cluster clusters.Live, connected bool) (bool, string) {
	switch {
	case !connected:
		return false, "not connected"
	case st.State != environments.StateReady && st.State != environments.StateDegraded:
		return false, fmt.Sprintf("%s: %s", st.State, st.Message)
	}
	if h := cluster.Health(); h.State != clusters.HealthReady {
		return false, fmt.Sprintf("%s: %s", h.State, h.Message)
	}
	return true, fmt.Sprintf("%s: %s", st.State, st.Message)
}
