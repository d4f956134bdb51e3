package dcm

import (
	"context"
	"net/http"
	"time"

	rmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/resource_manager"
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

// recordKey names one volume whose record in DCM is being checked.
type recordKey struct{ environmentID, volumeID string }

// recordCheck is one pending look, and how many came before it.
type recordCheck struct {
	recordKey
	look int
}

// CheckRecord has the volume's record in DCM read back a little after
// DCM created it, and the volume's status sent again if the record does
// not show it. Called by the API for each create by DCM that made a volume.
func (r *Registrar) CheckRecord(environmentID, volumeID string) {
	r.records.AddAfter(recordCheck{recordKey: recordKey{environmentID, volumeID}}, recordChecks[0])
}

// checkRecords works the queue of record checks until it shuts down.
func (r *Registrar) checkRecords(ctx context.Context) {
	for {
		c, shutdown := r.records.Get()
		if shutdown {
			return
		}
		if next, again := r.checkRecord(ctx, c); again && c.look+1 < len(recordChecks) {
			r.records.AddAfter(recordCheck{recordKey: c.recordKey, look: c.look + 1}, next)
		}
		r.records.Done(c)
	}
}

// checkRecord reads the volume's record from DCM and compares its status;
// again says to look once more (DCM has no record yet, could not be asked,
// or was just sent the status again), after next.
func (r *Registrar) checkRecord(ctx context.Context, c recordCheck) (next time.Duration, again bool) {
	next = recordChecks[min(c.look+1, len(recordChecks)-1)] - recordChecks[c.look]
	if !r.opts.Owned.Owns(c.environmentID) {
		return 0, false // its new owner reports what it sees
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.instances.GetInstanceWithResponse(ctx, c.volumeID, &rmapi.GetInstanceParams{})
	switch {
	case err != nil:
		r.log.DebugContext(ctx, "read a volume's record in DCM", "environment", c.environmentID, "volume", c.volumeID, "error", err)
		return next, true
	case resp.StatusCode() == http.StatusNotFound:
		return next, true
	case resp.JSON200 == nil || resp.JSON200.Status == nil:
		return next, true
	}
	repeated, err := r.opts.Repeat(ctx, c.environmentID, c.volumeID, *resp.JSON200.Status)
	if err != nil {
		r.log.WarnContext(ctx, "send a volume's status to DCM again", "environment", c.environmentID, "volume", c.volumeID, "error", err)
		return next, true
	}
	if repeated {
		r.log.InfoContext(ctx, "DCM's record missed the volume's status (its event came before DCM stored the record): sent again",
			"environment", c.environmentID, "volume", c.volumeID, "dcm_status", *resp.JSON200.Status)
	}
	return next, repeated
}
