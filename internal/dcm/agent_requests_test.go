package dcm

import (
	"testing"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// Every dcm.agent.error carries the agent's code and details as DCM reads
// them, and a problem of DCM's type URIs: the gateway's refusals by their
// kind, with the field at fault; the agent's own errors by their code.
func TestRefusalsAreProblemsOfDCMsTypes(t *testing.T) {
	for _, tc := range []struct {
		code   string
		fe     *fault.Error
		typ    string
		status int
		field  string
	}{
		{errRefused, fault.Invalid("spec.capacity", "must be less than 8Ei"), "invalid-argument", 400, "spec.capacity"},
		{errRefused, fault.New(fault.AlreadyExists, "taken"), "already-exists", 409, ""},
		{errRefused, fault.New(fault.Conflict, "another environment's claim"), "failed-precondition", 409, ""},
		{errRefused, fault.New(fault.FailedPrecondition, "no such class"), "failed-precondition", 422, ""},
		{errMaxDelivery, nil, "max-delivery-exceeded", 400, ""},
		{errUnsupportedServiceType, nil, "unsupported-service-type", 400, ""},
	} {
		details := "details"
		if tc.fe != nil {
			details = tc.fe.Error()
		}
		out := refusal(tc.code, details, tc.fe)
		p := out.data["problem"].(map[string]any)
		if out.typ != typeError || out.data["error"] != tc.code || out.data["details"] != details ||
			p["type"] != problemTypeBase+tc.typ || p["status"] != tc.status || p["detail"] != details {
			t.Errorf("%s %v: answered %s %v", tc.code, tc.fe, out.typ, out.data)
		}
		if field, named := p["field"]; named != (tc.field != "") || named && field != tc.field {
			t.Errorf("%s %v: problem field %v, want %q", tc.code, tc.fe, field, tc.field)
		}
	}
}
