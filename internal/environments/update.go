package environments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// readOnlyFields may appear in a GET response but never in a patch.
var readOnlyFields = []string{"id", "path", "connection", "status", "create_time", "update_time"}

// writeOnly are the credential fields of a patch, split from the spec part.
type writeOnly struct {
	Kubeconfig        *string              `json:"kubeconfig"`
	KubeconfigContext string               `json:"kubeconfig_context"`
	Credentials       *ExplicitCredentials `json:"credentials"`
}

func (w writeOnly) credentials() Credentials {
	c := Credentials{KubeconfigContext: w.KubeconfigContext}
	if w.Kubeconfig != nil {
		c.Kubeconfig = []byte(*w.Kubeconfig)
	}
	if w.Credentials != nil {
		c.Explicit = w.Credentials.Connection()
	}
	return c
}

// Update applies a JSON merge patch (RFC 7386) to an environment. New
// credentials or namespaces are probed first; if the probe fails nothing
// changes. The live cluster client follows the stored credentials.
func (s *Service) Update(ctx context.Context, id string, patch []byte) (Environment, error) {
	rec, err := s.get(ctx, id)
	if err != nil {
		return Environment{}, err
	}
	specPatch, creds, err := splitPatch(patch)
	if err != nil {
		return Environment{}, err
	}
	spec, err := applySpecPatch(rec.Spec, specPatch, id)
	if err != nil {
		return Environment{}, err
	}
	rotate := !creds.empty()
	if !rotate && creds.KubeconfigContext != "" {
		return Environment{}, fault.Invalid("kubeconfig_context", "applies only together with a kubeconfig")
	}
	if !rotate && reflect.DeepEqual(spec, rec.Spec) {
		return rec.Environment, nil
	}

	// New credentials or namespaces are probed. New credentials replace
	// stored ones that may not even open any more, so only a change of
	// namespaces opens the stored ones; other spec changes need none.
	probe := rotate || !slices.Equal(spec.Namespaces(), rec.Spec.Namespaces())
	var conn kubeconfig.Connection
	switch {
	case rotate:
		conn, _, err = s.resolveCredentials(creds)
	case probe:
		conn, err = s.open(ctx, rec)
	}
	if err != nil {
		return Environment{}, err
	}
	if err := s.checkRemovedNamespaces(ctx, id, rec.Spec.Namespaces(), spec.Namespaces()); err != nil {
		return Environment{}, err
	}
	next := rec
	next.Spec = spec
	if probe {
		result := s.prober.Probe(ctx, id, conn, spec.Namespaces())
		if result.State != clusters.HealthReady {
			return Environment{}, probeFailed(result)
		}
		next.Status = statusFrom(rec.Status, expiring(result, expiryOf(conn), id, conn))
	}
	if rotate {
		if err := s.setCredentials(ctx, &next, conn); err != nil {
			return Environment{}, err
		}
	}
	// Its cluster's other environments are looked at again where the
	// namespaces or the cluster may have changed, or sharing was turned
	// off.
	var admit func([]neighbour) error
	if probe || rec.Spec.ShareNamespaces && !spec.ShareNamespaces {
		admit = admitNeighbours(spec)
	}
	ok, err := s.repo.update(ctx, next, rotate, probe, admit)
	if err != nil {
		return Environment{}, err
	}
	if !ok {
		if err := s.Exists(ctx, id); err != nil {
			return Environment{}, err // deleted meanwhile: NotFound
		}
		return Environment{}, fault.New(fault.Conflict, "environment %q was changed concurrently; retry the update", id)
	}
	if rotate {
		s.sawGeneration(id, next.sealed.Generation)
	}
	s.audit(ctx, "environment updated", id, "credentials_rotated", rotate, "share_namespaces", spec.ShareNamespaces)
	s.publish(Change{EnvironmentID: id})
	return s.Get(ctx, id)
}

// checkRemovedNamespaces refuses to drop a namespace that still holds
// volumes: the gateway would stop watching claims it is responsible for.
func (s *Service) checkRemovedNamespaces(ctx context.Context, id string, before, after []string) error {
	var removed []string
	for _, ns := range before {
		if !slices.Contains(after, ns) {
			removed = append(removed, ns)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	n, err := s.repo.volumesIn(ctx, id, removed)
	if err != nil || n == 0 {
		return err
	}
	return fault.New(fault.Conflict, "namespaces %s still hold %d volume(s); delete them before removing the namespace", strings.Join(removed, ", "), n)
}

// splitPatch separates the write-only credential fields from the spec part
// and refuses read-only fields.
func splitPatch(patch []byte) (map[string]json.RawMessage, Credentials, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(patch, &doc); err != nil || doc == nil {
		return nil, Credentials{}, fault.Invalid("body", "must be a JSON object (a JSON merge patch)")
	}
	for _, f := range readOnlyFields {
		if _, ok := doc[f]; ok {
			return nil, Credentials{}, fault.Invalid(f, "is read-only")
		}
	}
	var w writeOnly
	creds := map[string]json.RawMessage{}
	for _, f := range []string{"kubeconfig", "kubeconfig_context", "credentials"} {
		raw, ok := doc[f]
		if !ok {
			continue
		}
		if string(bytes.TrimSpace(raw)) == "null" && f != "kubeconfig_context" {
			return nil, Credentials{}, fault.Invalid(f, "is write-only and cannot be removed; send new credentials to rotate them")
		}
		creds[f] = raw
		delete(doc, f)
	}
	if err := strictDecode(mustJSON(creds), &w); err != nil {
		return nil, Credentials{}, err
	}
	return doc, w.credentials(), nil
}

// applySpecPatch merges patch into the current spec. A null resets a field to
// its default, as RFC 7386 prescribes.
func applySpecPatch(current Spec, patch map[string]json.RawMessage, id string) (Spec, error) {
	merged, err := jsonpatch.MergePatch(mustJSON(current), mustJSON(patch))
	if err != nil {
		return Spec{}, fault.Invalid("body", "is not a valid JSON merge patch")
	}
	spec := Spec{DCM: DCMSettings{Register: true}}
	if err := strictDecode(merged, &spec); err != nil {
		return Spec{}, err
	}
	spec.normalize(id)
	return spec, spec.validate()
}

// strictDecode decodes JSON refusing unknown fields, and names the field of a
// type mismatch without echoing its value.
func strictDecode(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr):
		return fault.Invalid(typeErr.Field, "must be a JSON %s", typeErr.Type.Kind())
	case strings.Contains(err.Error(), "unknown field"):
		return fault.UnknownField(unknownField(err))
	}
	return fault.Invalid("body", "is not valid JSON for this resource")
}

// unknownField extracts the field name from encoding/json's unknown-field
// error (`json: unknown field "x"`), the only place the library exposes it.
func unknownField(err error) string {
	msg := err.Error()
	start, end := strings.IndexByte(msg, '"'), strings.LastIndexByte(msg, '"')
	if start < 0 || end <= start {
		return "body"
	}
	return msg[start+1 : end]
}
