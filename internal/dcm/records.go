package dcm

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	rmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/resource_manager"

	"github.com/dcm-project/storage-gateway/internal/controller"
)

// DCM's manager stores an instance only after its provider answered the
// create (service-provider-manager v0.1.0-rc.1: CreateInstance in
// internal/service/resource_manager/service_type_instance.go calls the
// provider, then stores the record with the answer's status), and its
// status consumer drops an event for an instance it has no record of
// (internal/consumer/consumer.go). A claim that binds at once reports
// RUNNING in that gap, and DCM's record would say PROVISIONING for good.
// So after each create DCM asked for, the environment's owner reads DCM's
// record back, and has the volume's status sent again while DCM's record
// says otherwise.

// recordChecks is when a created volume's record in DCM is read back,
// after the create: DCM has not stored it yet at the first look only when
// it is slow, and a record it never stores (a create it gave up on) is
// looked for no longer than the last of these.
var recordChecks = []time.Duration{2 * time.Second, 5 * time.Second, 15 * time.Second, time.Minute}

// recordKey names the volume whose record in DCM is checked: environment
// and volume id, joined by a slash (neither id can hold one).
func recordKey(environmentID, volumeID string) string { return environmentID + "/" + volumeID }

// CheckRecord has the volume's record in DCM read back a little after
// DCM created it, and the volume's status sent again if the record does
// not show it. Called by the API for each create by DCM that made a volume.
func (r *Registrar) CheckRecord(environmentID, volumeID string) {
	r.records.AddAfter(recordKey(environmentID, volumeID), recordChecks[0])
}

// newRecordChecks is the reconciler of record checks: each volume's looks
// come at the offsets of recordChecks, until one finds DCM's record showing
// the volume's status.
func (r *Registrar) newRecordChecks() *controller.Controller {
	var mu sync.Mutex
	looks := map[string]int{} // looks done per key
	return controller.New(controller.Options{Name: "DCM record checks", Logger: r.log,
		Reconcile: func(ctx context.Context, key string) (time.Duration, error) {
			mu.Lock()
			look := looks[key]
			looks[key] = look + 1
			mu.Unlock()
			env, volume, _ := strings.Cut(key, "/")
			if r.checkRecord(ctx, env, volume) && look+1 < len(recordChecks) {
				return recordChecks[look+1] - recordChecks[look], nil
			}
			mu.Lock()
			delete(looks, key)
			mu.Unlock()
			return 0, nil
		},
	})
}

// checkRecord reads the volume's record from DCM and compares its status;
// it says whether to look once more: DCM has no record yet, could not be
// asked, or was just sent the status again.
func (r *Registrar) checkRecord(ctx context.Context, environmentID, volumeID string) (again bool) {
	if !r.opts.Owned.Owns(environmentID) {
		return false // its new owner reports what it sees
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.instances.GetInstanceWithResponse(ctx, volumeID, &rmapi.GetInstanceParams{})
	switch {
	case err != nil:
		r.log.DebugContext(ctx, "read a volume's record in DCM", "environment", environmentID, "volume", volumeID, "error", err)
		return true
	case resp.StatusCode() == http.StatusNotFound:
		return true
	case resp.JSON200 == nil || resp.JSON200.Status == nil:
		return true
	}
	repeated, err := r.opts.Repeat(ctx, environmentID, volumeID, *resp.JSON200.Status)
	if err != nil {
		r.log.WarnContext(ctx, "send a volume's status to DCM again", "environment", environmentID, "volume", volumeID, "error", err)
		return true
	}
	if repeated {
		r.log.InfoContext(ctx, "DCM's record missed the volume's status (its event came before DCM stored the record): sent again",
			"environment", environmentID, "volume", volumeID, "dcm_status", *resp.JSON200.Status)
	}
	return repeated
}
