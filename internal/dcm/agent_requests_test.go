package dcm

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// Heartbeats reuse one connection to the agent API: an answer the agents
// do not read (a heartbeat's) is read to its end all the same, or every
// heartbeat of every agent would open and close a connection.
func TestAgentAPICallsKeepTheirConnection(t *testing.T) {
	var mu sync.Mutex
	opened := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"agent_id":"a1","name":"storage-gateway-east","health_status":"ready","padding":"` + strings.Repeat("x", 8<<10) + `"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			mu.Lock()
			opened++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	client, err := Credentials{}.httpClient()
	if err != nil {
		t.Fatal(err)
	}
	a := &Agents{opts: AgentOptions{URL: srv.URL}, http: client}
	for range 20 {
		if err := a.call(t.Context(), http.MethodPut, "/agents/a1/heartbeat", map[string]any{"consumer_lag": 0}, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if opened != 1 {
		t.Fatalf("20 heartbeats opened %d connections", opened)
	}
}
