package dcm

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	spmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/provider"
	rmapi "github.com/dcm-project/service-provider-manager/api/v1alpha1/resource_manager"

	"github.com/dcm-project/storage-gateway/internal/environments"
)

// A provider's name is how DCM finds the instances made through it, and
// DCM's manager updates a provider registered again under an existing name.
// So registering under a name another endpoint holds — DCM's per-cluster
// storage SP, at a cut-over — moves every instance of that provider onto
// the gateway, and that SP registering again (it does at every start) moves
// them back. The registrar guards both edges: it takes a name over only
// when the environment can serve every instance DCM holds under it (or an
// admin forces it), and it reads its providers back from DCM and registers
// again when another endpoint holds one of their names.

// StateBlocked is the registration of an environment whose provider name
// another endpoint holds in DCM with instances the environment could not
// serve: taking the name over would have DCM hear 404 for them.
const StateBlocked = "BLOCKED"

// maxListedIDs bounds the instance ids a registration state names.
const maxListedIDs = 20

// Instance is one of DCM's instances of a provider.
type Instance struct {
	ID, Name, Namespace string
}

// holders are DCM's storage providers by name, as one listing found them.
type holders map[string]spmapi.Provider

// listingTTL is how long one listing of DCM's providers serves the passes
// after it: a thousand environments registered at once list DCM's
// providers about once a second, not a thousand times, and a name another
// endpoint took is seen within it.
const listingTTL = time.Second

// providerListing is the last listing of DCM's providers and when it was
// made; mu is held while one is made, so concurrent passes share it.
type providerListing struct {
	mu      sync.Mutex
	at      time.Time
	holders holders
}

// listed returns DCM's storage providers by name, from a listing younger
// than listingTTL when there is one.
func (r *Registrar) listed(ctx context.Context) (holders, error) {
	l := &r.listing
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holders != nil && time.Since(l.at) < listingTTL {
		return l.holders, nil
	}
	h, err := r.listHolders(ctx)
	if err != nil {
		return nil, err
	}
	l.holders, l.at = h, time.Now()
	return h, nil
}

// accepted updates the shared listing with a provider DCM just accepted.
func (r *Registrar) accepted(p spmapi.Provider) {
	l := &r.listing
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holders != nil {
		l.holders[p.Name] = p
	}
}

// listHolders lists DCM's storage providers (DCM offers no lookup by name).
func (r *Registrar) listHolders(ctx context.Context) (holders, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	out := holders{}
	storage, size := "storage", 100
	params := &spmapi.ListProvidersParams{Type: &storage, MaxPageSize: &size}
	for {
		resp, err := r.client.ListProvidersWithResponse(ctx, params)
		if err != nil {
			return nil, err
		}
		if resp.JSON200 == nil {
			return nil, fmt.Errorf("DCM answered HTTP %d listing providers", resp.StatusCode())
		}
		for _, p := range deref(resp.JSON200.Providers) {
			out[p.Name] = p
		}
		if next := resp.JSON200.NextPageToken; next == nil || *next == "" {
			return out, nil
		}
		params.PageToken = resp.JSON200.NextPageToken
	}
}

// Instances lists DCM's instances of the provider named name (deleted ones
// left out), with the name DCM's spec gave each and the namespace its
// hints ask for, if any.
func (r *Registrar) Instances(ctx context.Context, name string) ([]Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	size := 100
	params := &rmapi.ListInstancesParams{Provider: &name, MaxPageSize: &size}
	var out []Instance
	for {
		resp, err := r.instances.ListInstancesWithResponse(ctx, params)
		if err != nil {
			return nil, err
		}
		if resp.JSON200 == nil {
			return nil, fmt.Errorf("DCM answered HTTP %d listing the instances of %s", resp.StatusCode(), name)
		}
		for _, in := range deref(resp.JSON200.Instances) {
			if in.Id == nil || in.ProviderName != name {
				continue
			}
			out = append(out, Instance{ID: *in.Id, Name: specString(in.Spec, "metadata", "name"),
				Namespace: specString(in.Spec, "provider_hints", "kubernetes", "namespace")})
		}
		if next := resp.JSON200.NextPageToken; next == nil || *next == "" {
			return out, nil
		}
		params.PageToken = resp.JSON200.NextPageToken
	}
}

// coverage sorts DCM's instances of env's provider that env does not serve
// into those it has no adoptable claim for (it could never serve them) and
// those whose claim it has not adopted yet.
func (r *Registrar) coverage(ctx context.Context, env environments.Environment) (without, unadopted []Instance, err error) {
	all, err := r.Instances(ctx, env.Spec.DCM.ProviderName)
	if err != nil || len(all) == 0 {
		return nil, nil, err
	}
	ids := make([]string, len(all))
	for i, in := range all {
		ids[i] = in.ID
	}
	recorded, adoptable, err := r.opts.Served(ctx, env.ID, ids)
	if err != nil {
		return nil, nil, err
	}
	for _, in := range all {
		switch {
		case recorded[in.ID]:
		case adoptable[in.ID]:
			unadopted = append(unadopted, in)
		default:
			without = append(without, in)
		}
	}
	return without, unadopted, nil
}

// InstancesWithoutClaim are DCM's instances of env's provider that env
// neither serves nor can adopt.
func (r *Registrar) InstancesWithoutClaim(ctx context.Context, env environments.Environment) ([]Instance, error) {
	without, _, err := r.coverage(ctx, env)
	return without, err
}

// withInstances records in reg how many of DCM's instances env cannot
// serve, and the first of them.
func withInstances(reg environments.DCMRegistration, without []Instance, at time.Time) environments.DCMRegistration {
	n := len(without)
	reg.InstancesWithoutClaim = &n
	reg.InstancesWithoutClaimIDs = nil
	for _, in := range without[:min(n, maxListedIDs)] {
		reg.InstancesWithoutClaimIDs = append(reg.InstancesWithoutClaimIDs, in.ID)
	}
	reg.InstancesCheckTime = &at
	return reg
}

// blocked says why env's registration is held back: DCM holds instances of
// its provider name that env does not serve — without a claim in its
// namespaces, or with one not adopted yet — each of which would answer 404
// after a take-over, and be forgotten by DCM.
func blocked(env environments.Environment, holder spmapi.Provider, without, unadopted []Instance) string {
	var parts []string
	if len(without) > 0 {
		parts = append(parts, fmt.Sprintf("%d with no claim an adoption can take in this environment's namespaces (%s): "+
			"serve their namespace (env adopt --dry-run says why a claim is skipped)", len(without), listed(without)))
	}
	if len(unadopted) > 0 {
		parts = append(parts, fmt.Sprintf("%d whose claims are not adopted yet (%s): storage-gateway env adopt %s",
			len(unadopted), listed(unadopted), env.ID))
	}
	return fmt.Sprintf("not taking over DCM's provider %s from %s: DCM holds instances of it that this environment does not "+
		"serve, which would answer 404 and be forgotten by DCM — %s; or take the name over anyway "+
		"(storage-gateway env apply %s --dcm-take-over)", holder.Name, holder.Endpoint, strings.Join(parts, "; "), env.ID)
}

// listed names the first instances, with the namespace DCM asked for.
func listed(instances []Instance) string {
	ids := make([]string, 0, min(len(instances), maxListedIDs))
	for _, in := range instances[:min(len(instances), maxListedIDs)] {
		id := in.ID
		if in.Namespace != "" {
			id += " (namespace " + in.Namespace + ")"
		}
		ids = append(ids, id)
	}
	if len(instances) > maxListedIDs {
		ids = append(ids, "…")
	}
	return strings.Join(ids, ", ")
}

// providerOf reads back the provider DCM has under id, nil when DCM has
// none.
func (r *Registrar) providerOf(ctx context.Context, id string) (*spmapi.Provider, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := r.client.GetProviderWithResponse(ctx, id)
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode() == http.StatusNotFound:
		return nil, nil
	case resp.JSON200 == nil:
		return nil, fmt.Errorf("DCM answered HTTP %d reading provider %s", resp.StatusCode(), id)
	}
	return resp.JSON200, nil
}

// specString reads a string at path in an instance's spec, "" if absent.
func specString(spec map[string]any, path ...string) string {
	var cur any = spec
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return slices.Clone(*p)
}
