package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/test/contract"
	"github.com/dcm-project/storage-gateway/test/gatewaytest"
)

// baseRequest is a valid request of one operation, which the fuzz test
// breaks one part at a time.
type baseRequest struct {
	path    map[string]string
	query   url.Values
	headers map[string]string
	body    any
}

// mutation is one invalid request derived from a base.
type mutation struct {
	what string
	// field is what a 400 must name: the parameter, or the body field's
	// JSON path (body for the body as a whole).
	field string
	req   baseRequest
	raw   []byte // a body sent as is, when set
}

// TestInvalidRequestsAreRefusedNeverFailed generates invalid requests for
// every operation from the OpenAPI document — parameters of the wrong type,
// out of their enum, over their length or pattern, missing when required;
// bodies with each required field missing, an unknown field, each field of
// the wrong type, out of its enum or over its length, nested ones included —
// and proves each is answered with a problem+json 4xx, never a 5xx, that a
// 400 names the broken field (its JSON path, or the parameter), and that
// none of them changed anything.
func TestInvalidRequestsAreRefusedNeverFailed(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := client{t: t, base: g.URL, token: g.Tokens.Admin}
	east := clusters[0]
	envID := east.Spec.Environment.ID
	c.register(east)
	volumeID := uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+volumeID, map[string]any{"spec": storageSpec("fuzz", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	kubeconfig, err := east.GatewayKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// A volume of the CSI plugin's class and one of its snapshots.
	plugged := c.runningVolume(envID, "snapshots")
	snapshotID := uuid.NewString()
	code, body = c.do(http.MethodPost, snapshotsPath(envID, plugged)+"?id="+snapshotID, map[string]any{"snapshot_class": "snapshots"})
	c.want(http.StatusCreated, code, body)
	env := map[string]string{"environment_id": envID}
	vol := map[string]string{"environment_id": envID, "volume_id": volumeID}
	snapVol := map[string]string{"environment_id": envID, "volume_id": plugged}
	snap := map[string]string{"environment_id": envID, "volume_id": plugged, "snapshot_id": snapshotID}
	defaults := map[string]any{"storage_class": "standard", "access_mode": "ReadWriteOnce", "volume_mode": "Filesystem"}
	overrides := map[string]any{"storage_classes": map[string]any{"standard": map[string]any{"access_modes": []any{"ReadWriteOnce"}, "volume_modes": []any{"Filesystem"}}}}
	bases := map[string]baseRequest{
		"createEnvironment": {query: url.Values{"id": {"fuzzed"}}, body: map[string]any{
			"kubeconfig": string(kubeconfig), "display_name": "Fuzzed", "description": "d", "labels": map[string]any{"tier": "dev"},
			"region": "r", "zone": "z", "namespace": "dcm-volumes", "allowed_namespaces": []any{"dcm-scratch"},
			"defaults": defaults, "dcm": map[string]any{"register": false, "provider_name": "fuzzed"}, "capability_overrides": overrides,
			"share_namespaces": true,
		}},
		"listEnvironments": {query: url.Values{"max_page_size": {"5"}, "label_selector": {"tier=dev"}, "region": {"local"}, "state": {"READY"}}},
		"getEnvironment":   {path: env},
		"updateEnvironment": {path: env, body: map[string]any{"display_name": "x", "labels": map[string]any{"a": "b"}, "defaults": defaults,
			"dcm": map[string]any{"register": false}, "capability_overrides": overrides, "allowed_namespaces": []any{"dcm-scratch"},
			"credentials": map[string]any{"server": "https://127.0.0.1:6443", "token": "fuzz-token"}}},
		"deleteEnvironment":   {path: env, query: url.Values{"force": {"false"}}},
		"verifyEnvironment":   {path: env},
		"takeOverDCMProvider": {path: env},
		"adoptVolumes":        {path: env, body: map[string]any{"namespace": "dcm-volumes", "validate_only": true}},
		"listPlacements": {query: url.Values{"capacity": {"1Gi"}, "access_mode": {"ReadWriteOnce"}, "volume_mode": {"Filesystem"},
			"region": {"local"}, "zone": {"east-a"}, "expandable": {"true"}, "explain": {"true"}}},
		"listStorageClasses": {query: url.Values{"max_page_size": {"5"}, "environment": {envID}, "region": {"local"}, "provisioner": {"p"},
			"access_mode": {"ReadWriteOnce"}, "volume_mode": {"Block"}, "expandable": {"true"}, "is_default": {"false"}}},
		"listFleetVolumes":              {query: url.Values{"max_page_size": {"5"}, "environment": {envID}, "status": {"RUNNING"}, "storage_class": {"standard"}}},
		"listEnvironmentStorageClasses": {path: env},
		"getEnvironmentStorageClass":    {path: map[string]string{"environment_id": envID, "storage_class": "standard"}},
		"createVolume": {path: env, query: url.Values{"id": {uuid.NewString()}}, body: map[string]any{"spec": map[string]any{
			"service_type": "storage", "capacity": "1Gi", "metadata": map[string]any{"name": "fuzzed", "labels": map[string]any{"team": "e2e"}},
			"provider_hints": map[string]any{"kubernetes": map[string]any{"storage_class": "standard", "access_mode": "ReadWriteOnce",
				"volume_mode": "Filesystem", "namespace": "dcm-volumes"}},
		}}},
		"listVolumes":      {path: env, query: url.Values{"max_page_size": {"5"}}},
		"getVolumesHealth": {path: env},
		"getVolume":        {path: vol},
		"updateVolume":     {path: vol, body: map[string]any{"capacity": "2Gi"}},
		"deleteVolume":     {path: vol},
		"listAuditEvents": {query: url.Values{"max_page_size": {"5"}, "subject": {"test-admin"}, "environment": {envID},
			"action": {"createVolume"}, "start_time": {"2026-01-01T00:00:00Z"}, "end_time": {"2036-01-01T00:00:00Z"}}},
		"getHealthz": {}, "getReadyz": {}, "getOpenAPI": {},
		"retierVolume":   {path: snapVol, body: map[string]any{"tier": "gold"}},
		"createSnapshot": {path: snapVol, query: url.Values{"id": {uuid.NewString()}}, body: map[string]any{"snapshot_class": "snapshots"}},
		"listSnapshots":  {path: snapVol, query: url.Values{"max_page_size": {"5"}}},
		"getSnapshot":    {path: snap},
		"deleteSnapshot": {path: snap},
	}

	spec, router := contract.Load(t)
	sent := 0
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			base, ok := bases[op.OperationID]
			if !ok {
				t.Errorf("%s has no valid base request to fuzz from: add one", op.OperationID)
				continue
			}
			// The base itself must be valid, or every mutation would fail
			// for a reason the test did not choose.
			if err := validate(router, newRequest(t, method, g.URL, path, base, nil)); err != nil {
				t.Fatalf("%s: the base request is not valid: %v", op.OperationID, err)
			}
			for _, m := range mutations(op, item.Parameters, base) {
				code, ct, answer := sendRaw(t, newRequest(t, method, g.URL, path, m.req, m.raw), g.Tokens.Admin)
				sent++
				if code < 400 || code >= 500 || !strings.HasPrefix(ct, "application/problem+json") {
					t.Errorf("%s with %s: %d %s %s, want a 4xx problem", op.OperationID, m.what, code, ct, answer)
					continue
				}
				var problem struct{ Field string }
				if code == http.StatusBadRequest && (json.Unmarshal([]byte(answer), &problem) != nil || problem.Field != m.field) {
					t.Errorf("%s with %s: %s, want the field %q named", op.OperationID, m.what, answer, m.field)
				}
			}
		}
	}
	t.Logf("%d invalid requests sent", sent)
	if sent < 120 {
		t.Fatalf("only %d invalid requests were generated", sent)
	}

	// Nothing changed: one environment, its two volumes (neither on a
	// tier), the one snapshot, never verified.
	code, list := c.do(http.MethodGet, "/api/v1alpha1/environments", nil)
	c.want(http.StatusOK, code, list)
	if envs := list["environments"].([]any); len(envs) != 1 || field(envs[0].(map[string]any), "display_name") == "x" {
		t.Fatalf("environments after the fuzzing: %v", envs)
	}
	code, vols := c.do(http.MethodGet, volumesPath(envID), nil)
	c.want(http.StatusOK, code, vols)
	if n := len(vols["volumes"].([]any)); n != 2 {
		t.Fatalf("%d volumes after the fuzzing, want 2", n)
	}
	for _, v := range vols["volumes"].([]any) {
		if tier := v.(map[string]any)["tier"]; tier != nil {
			t.Fatalf("a volume is on tier %v after the fuzzing", tier)
		}
	}
	code, snaps := c.do(http.MethodGet, snapshotsPath(envID, plugged), nil)
	c.want(http.StatusOK, code, snaps)
	if got := idsOf(snaps["snapshots"]); !slices.Equal(got, []string{snapshotID}) {
		t.Fatalf("snapshots after the fuzzing: %v, want only %s", got, snapshotID)
	}
}

// mutations breaks one parameter or one body field at a time.
func mutations(op *openapi3.Operation, shared openapi3.Parameters, base baseRequest) []mutation {
	var out []mutation
	params := append(slices.Clone(shared), op.Parameters...)
	for _, ref := range params {
		p := ref.Value
		for what, value := range badValues(p.Schema.Value, true) {
			m := mutation{what: fmt.Sprintf("%s %s %s", p.In, p.Name, what), field: p.Name, req: base.clone()}
			if strings.HasPrefix(what, "with an item") {
				m.field += "[0]"
			}
			m.req.set(p, value)
			out = append(out, m)
		}
		if p.Required && p.In == openapi3.ParameterInQuery {
			m := mutation{what: "query " + p.Name + " missing", field: p.Name, req: base.clone()}
			m.req.query.Del(p.Name)
			out = append(out, m)
		}
	}
	if op.RequestBody == nil || base.body == nil {
		return out
	}
	schema := op.RequestBody.Value.Content.Get("application/json").Schema.Value
	walkBody(schema, base.body, "", func(field, what string, broken any) {
		m := mutation{what: "body " + field + " " + what, field: field, req: base.clone()}
		if m.field == "" {
			m.field = "body"
		}
		m.req.body = broken
		out = append(out, m)
	}, func(v any) any { return v })
	broken := map[string]string{"body not JSON": "{", "body an array": "[]"}
	if op.RequestBody.Value.Required { // an optional body may be left out
		broken["body empty"] = ""
	}
	for what, raw := range broken {
		out = append(out, mutation{what: what, field: "body", req: base.clone(), raw: []byte(raw)})
	}
	return out
}

// walkBody calls emit with a whole body in which one value under schema
// (at the JSON path path, "" for the body itself, inside the body rebuilt by
// wrap) is broken, with the path of the field a 400 must name, recursing
// into objects and arrays.
func walkBody(schema *openapi3.Schema, value any, path string, emit func(field, what string, broken any), wrap func(any) any) {
	if len(schema.OneOf) > 0 {
		for _, branch := range schema.OneOf {
			if branch.Value.VisitJSON(value) == nil {
				walkBody(branch.Value, value, path, emit, wrap)
				return
			}
		}
	}
	for what, bad := range badValues(schema, false) {
		emit(path, what, wrap(bad))
	}
	child := func(key string) string {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	switch v := value.(type) {
	case map[string]any:
		with := func(k string, x any, drop bool) map[string]any {
			out := make(map[string]any, len(v)+1)
			for key, val := range v {
				out[key] = val
			}
			if drop {
				delete(out, k)
			} else {
				out[k] = x
			}
			return out
		}
		for _, req := range schema.Required {
			if _, ok := v[req]; ok {
				emit(child(req), "missing", wrap(with(req, nil, true)))
			}
		}
		if ap := schema.AdditionalProperties; ap.Has != nil && !*ap.Has {
			emit(child("not_a_field"), "an unknown field", wrap(with("not_a_field", 1, false)))
		}
		for key, val := range v {
			prop := schema.Properties[key]
			if prop == nil && schema.AdditionalProperties.Schema != nil {
				prop = schema.AdditionalProperties.Schema
			}
			if prop == nil {
				continue
			}
			walkBody(prop.Value, val, child(key), emit, func(x any) any { return wrap(with(key, x, false)) })
		}
	case []any:
		if len(v) > 0 && schema.Items != nil {
			walkBody(schema.Items.Value, v[0], path+"[0]", emit, func(x any) any {
				out := slices.Clone(v)
				out[0] = x
				return wrap(out)
			})
		}
	}
}

// badValues are values that break schema: the wrong JSON type, a value out
// of its enum, longer than its maxLength, not matching its pattern, more
// items than its maxItems, below its minimum. A parameter gets them as
// text, so a string parameter cannot have the wrong type.
func badValues(s *openapi3.Schema, param bool) map[string]any {
	out := map[string]any{}
	switch {
	case s.Type.Is("string"):
		if !param {
			out["of the wrong type"] = 12345
		}
		if len(s.Enum) > 0 {
			out["out of its enum"] = "NOT_A_VALUE"
		}
		if s.MaxLength != nil {
			out["over its maxLength"] = strings.Repeat("a", int(*s.MaxLength)+1)
		}
		if s.Pattern != "" {
			out["not matching its pattern"] = "Not Valid!"
		}
		if s.Format == "date-time" {
			out["not a date-time"] = "yesterday"
		}
	case s.Type.Is("integer"), s.Type.Is("number"):
		out["of the wrong type"] = "not-a-number"
		if s.Min != nil {
			out["below its minimum"] = *s.Min - 1
		}
	case s.Type.Is("boolean"):
		out["of the wrong type"] = "maybe"
	case s.Type.Is("object"):
		out["of the wrong type"] = "not-an-object"
	case s.Type.Is("array"):
		if !param {
			out["of the wrong type"] = "not-an-array"
		} else if s.Items != nil {
			for what, bad := range badValues(s.Items.Value, true) {
				out["with an item "+what] = []any{bad}
			}
		}
		if s.MaxItems != nil {
			items := make([]any, int(*s.MaxItems)+1)
			for i := range items {
				items[i] = fmt.Sprintf("item-%d", i)
			}
			out["over its maxItems"] = items
		}
	}
	return out
}

func (b baseRequest) clone() baseRequest {
	c := baseRequest{path: map[string]string{}, query: url.Values{}, headers: map[string]string{}, body: b.body}
	for k, v := range b.path {
		c.path[k] = v
	}
	for k, v := range b.query {
		c.query[k] = slices.Clone(v)
	}
	for k, v := range b.headers {
		c.headers[k] = v
	}
	return c
}

// set puts a (bad) value into the parameter p.
func (b *baseRequest) set(p *openapi3.Parameter, value any) {
	var s string
	switch v := value.(type) {
	case []any:
		b.query.Del(p.Name)
		for _, item := range v {
			b.query.Add(p.Name, fmt.Sprint(item))
		}
		return
	default:
		s = fmt.Sprint(v)
	}
	switch p.In {
	case openapi3.ParameterInPath:
		b.path[p.Name] = s
	case openapi3.ParameterInQuery:
		b.query.Set(p.Name, s)
	case openapi3.ParameterInHeader:
		b.headers[p.Name] = s
	}
}

func newRequest(t *testing.T, method, base, template string, r baseRequest, raw []byte) *http.Request {
	t.Helper()
	path := template
	for k, v := range r.path {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	if len(r.query) > 0 {
		path += "?" + r.query.Encode()
	}
	body := raw
	if raw == nil && r.body != nil {
		var err error
		if body, err = json.Marshal(r.body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil || raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	return req
}

// validate checks a request against the contract as the gateway does,
// leaving it ready to send.
func validate(router routers.Router, req *http.Request) error {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	probe := req.Clone(context.Background())
	probe.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := router.FindRoute(probe)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: probe, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
}

func sendRaw(t *testing.T, req *http.Request, token string) (int, string, string) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(raw)
}
