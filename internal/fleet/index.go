package fleet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

// Meta is what the registry says about an environment that the fleet view
// shows or needs.
type Meta struct {
	ID     string
	Region string
	Zone   string
	// State is the environment's registered state (placement takes READY
	// ones only), as of the last registry read.
	State     string
	Overrides capabilities.Overrides
}

// Detail is one class in one environment as the API shows it
// (StorageClassDetail): the class and where it lives, and whether the data is
// current.
type Detail struct {
	EnvironmentID string `json:"environment_id"`
	Region        string `json:"region"`
	Zone          string `json:"zone"`
	// Stale is true when the environment's cluster cannot be watched now
	// (unreachable, not synced yet, or only known from before a restart).
	Stale bool `json:"stale"`
	// ObservedTime is when the data was last seen current: when it last
	// changed or its watch (re)connected while live, the moment the gateway
	// lost the cluster once stale.
	ObservedTime time.Time `json:"observed_time"`
	capabilities.Class
}

// Index holds every environment's classes. It is safe for concurrent use;
// queries take a read lock for as long as it takes to collect pointers to
// immutable views.
type Index struct {
	mu sync.RWMutex
	// envs by id; order holds them sorted by id, so queries list
	// environments in id order without a lookup each.
	envs  map[string]*entry
	order []*entry
	// names interns class names: a query groups details by a small number
	// instead of hashing strings. compactNames drops names no longer in use.
	names    map[string]int
	nameList []string
}

// entry is one environment: its inputs and the view built from them.
type entry struct {
	meta  Meta
	objs  capabilities.Objects // slimmed (capabilities.Slim)
	fresh bool
	// writable: the owner's connection takes writes (snapshot.writable).
	writable bool
	observed time.Time
	classes  []capabilities.Class
	view     *envView
}

// hasData reports whether the environment's classes were ever observed (live
// or restored): observed is set exactly then.
func (e *entry) hasData() bool { return !e.observed.IsZero() }

// envView is an immutable rendering of an entry that queries share.
type envView struct {
	meta     Meta
	stale    bool
	writable bool
	observed time.Time
	details  []detail // by class name
	// series are the classes' metrics.
	series classSeries
}

// detail is one class of one environment. The fields queries filter and
// sum on come first, precomputed, so a fleet-wide query reads one cache line
// per detail; json is the detail's API form, encoded once.
type detail struct {
	facet
	json      []byte
	placement placementFacts
	Detail
}

// facet is what queries filter and sum on, in compact form.
type facet struct {
	// access and volume are bit sets over capabilities.AllAccessModes and
	// AllVolumeModes; knownAccess/knownVolume false means unknown.
	access, volume           uint8
	knownAccess, knownVolume bool
	expandable, isDefault    bool
	stale, hasCapacity       bool
	capacityBytes            int64
	name, provisioner        string
	nameID                   int // in Index.names
	snapshots                capabilities.Support
	tiers                    []string // the detail's: nil when unknown
}

func newFacet(c capabilities.Class, stale bool) facet {
	f := facet{
		access: modeBits(capabilities.AllAccessModes, c.AccessModes), volume: modeBits(capabilities.AllVolumeModes, c.VolumeModes),
		knownAccess: c.AccessModes != nil, knownVolume: c.VolumeModes != nil,
		expandable: c.AllowVolumeExpansion, isDefault: c.IsDefault, stale: stale,
		name: c.Name, provisioner: c.Provisioner, snapshots: c.Snapshots, tiers: c.Tiers,
	}
	if c.Capacity != nil {
		f.hasCapacity, f.capacityBytes = true, c.Capacity.TotalBytes
	}
	return f
}

// modeBits sets bit i for each of modes that is all[i].
func modeBits(all, modes []string) uint8 {
	var bits uint8
	for i, m := range all {
		if slices.Contains(modes, m) {
			bits |= 1 << i
		}
	}
	return bits
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{envs: map[string]*entry{}, names: map[string]int{}}
}

// SetEnvironments makes the index hold exactly these environments: new ones
// start stale and empty, changed settings are applied, missing ones dropped.
// It returns the ids that are new.
func (ix *Index) SetEnvironments(metas []Meta) (added []string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	keep := make(map[string]bool, len(metas))
	for _, m := range metas {
		keep[m.ID] = true
		if ix.set(m) {
			added = append(added, m.ID)
		}
	}
	for id := range ix.envs {
		if !keep[id] {
			delete(ix.envs, id)
		}
	}
	ix.order = ix.order[:0]
	for _, e := range ix.envs {
		ix.order = append(ix.order, e)
	}
	slices.SortFunc(ix.order, compareIDs)
	ix.compactNames()
	return added
}

// Has reports whether the index holds environment id.
func (ix *Index) Has(id string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	_, ok := ix.envs[id]
	return ok
}

// SetEnvironment adds one environment, or applies its changed settings; it
// reports whether the environment is new (stale and empty until observed
// or replicated).
func (ix *Index) SetEnvironment(m Meta) (added bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.set(m) {
		return false
	}
	i, _ := slices.BinarySearchFunc(ix.order, ix.envs[m.ID], compareIDs)
	ix.order = slices.Insert(ix.order, i, ix.envs[m.ID])
	return true
}

// RemoveEnvironment drops an environment (deleted).
func (ix *Index) RemoveEnvironment(id string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok {
		return
	}
	delete(ix.envs, id)
	if i, found := slices.BinarySearchFunc(ix.order, e, compareIDs); found {
		ix.order = slices.Delete(ix.order, i, i+1)
	}
	ix.compactNames()
}

// set applies m to its entry, creating it (not yet in order) if new, and
// reports whether it did. The caller holds ix.mu for writing.
func (ix *Index) set(m Meta) (added bool) {
	e, ok := ix.envs[m.ID]
	switch {
	case !ok:
		e = &entry{meta: m}
		ix.envs[m.ID] = e
	case reflect.DeepEqual(e.meta, m):
		return false
	default:
		if !reflect.DeepEqual(e.meta.Overrides, m.Overrides) {
			e.classes = capabilities.Describe(e.objs, m.Overrides)
		}
		e.meta = m
	}
	ix.render(e)
	return !ok
}

func compareIDs(a, b *entry) int { return strings.Compare(a.meta.ID, b.meta.ID) }

// minNamesToCompact is how many interned names are never worth compacting.
const minNamesToCompact = 64

// compactNames forgets interned class names no environment has any more
// (classes come and go), so per-query work stays proportional to the names
// in use. It re-renders every environment, so it only runs once the list
// has grown well past what is in use. The caller holds ix.mu for writing.
func (ix *Index) compactNames() {
	if len(ix.nameList) <= minNamesToCompact {
		return
	}
	inUse := map[string]bool{}
	for _, e := range ix.order {
		for _, c := range e.classes {
			inUse[c.Name] = true
		}
	}
	if len(ix.nameList) <= 2*len(inUse)+minNamesToCompact {
		return
	}
	ix.names, ix.nameList = map[string]int{}, nil
	for _, e := range ix.order {
		ix.render(e)
	}
}

// Observe records live storage objects of an environment's cluster, read
// from its synced caches at `at`: the path every informer change takes. It
// reports whether what the environment shows changed — its classes, its
// quotas (placement reads them), or stale to live — so its owner persists
// it for the other replicas; unknown environments are ignored.
func (ix *Index) Observe(id string, objs capabilities.Objects, at time.Time) (changed bool) {
	return ix.update(id, objs, func(e *entry, objs capabilities.Objects, classes []capabilities.Class) bool {
		if e.hasData() && e.fresh && reflect.DeepEqual(classes, e.classes) &&
			objs.QuotasDenied == e.objs.QuotasDenied && reflect.DeepEqual(objs.Quotas, e.objs.Quotas) {
			e.objs = objs // same view; keep the newest objects
			return false
		}
		e.objs, e.classes, e.fresh, e.observed = objs, classes, true, at
		ix.render(e)
		return true
	})
}

// update slims objs and describes them for environment id outside the
// write lock, so queries never wait for it (settings changed meanwhile are
// rare and mean describing again), then applies them with the write lock
// held and returns what apply says; unknown environments are ignored.
func (ix *Index) update(id string, objs capabilities.Objects, apply func(e *entry, objs capabilities.Objects, classes []capabilities.Class) bool) bool {
	objs = capabilities.Slim(objs)
	ix.mu.RLock()
	e, ok := ix.envs[id]
	var overrides capabilities.Overrides
	if ok {
		overrides = e.meta.Overrides
	}
	ix.mu.RUnlock()
	if !ok {
		return false
	}
	classes := capabilities.Describe(objs, overrides)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.envs[id] != e {
		return false // removed (or removed and added again) meanwhile
	}
	if !reflect.DeepEqual(e.meta.Overrides, overrides) {
		classes = capabilities.Describe(objs, e.meta.Overrides)
	}
	return apply(e, objs, classes)
}

// MarkStale records that an environment's cluster cannot be watched since
// `at`; its last known classes stay, flagged stale. It reports whether the
// environment was live until now.
func (ix *Index) MarkStale(id string, at time.Time) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok || !e.fresh {
		return false
	}
	e.fresh, e.writable = false, false
	if e.hasData() {
		e.observed = at
	}
	ix.render(e)
	return true
}

// SetWritable records whether the environment's connection takes writes
// (READY, every cache synced) and reports whether that changed; unknown
// environments are ignored.
func (ix *Index) SetWritable(id string, writable bool) (changed bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok || e.writable == writable {
		return false
	}
	e.writable = writable
	ix.render(e)
	return true
}

// Replicate shows an environment another replica owns as its owner's view
// shows it (from the owner's persisted snapshot): its objects, live or
// stale, writable or not, observed at `observed`. It reports false for an
// environment the index does not hold (yet).
func (ix *Index) Replicate(id string, objs capabilities.Objects, live, writable bool, observed time.Time) bool {
	return ix.update(id, objs, func(e *entry, objs capabilities.Objects, classes []capabilities.Class) bool {
		e.objs, e.classes, e.fresh, e.writable, e.observed = objs, classes, live, writable, observed
		ix.render(e)
		return true
	})
}

// Restore loads persisted objects observed at `observed` into an
// environment that has no data yet (after a restart); they show as stale
// until the cluster is watched again. They are slimmed again, so a row
// written by an older gateway never shows more than this one would.
func (ix *Index) Restore(id string, objs capabilities.Objects, observed time.Time) {
	objs = capabilities.Slim(objs)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok || e.hasData() {
		return
	}
	e.objs, e.observed = objs, observed
	e.classes = capabilities.Describe(objs, e.meta.Overrides)
	ix.render(e)
}

// snapshot returns what Store persists for an environment, if it has data:
// its objects, whether they are live, and when they were observed.
func (ix *Index) snapshot(id string) (snapshot, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.envs[id]
	if !ok || !e.hasData() {
		return snapshot{}, false
	}
	return snapshot{objects: e.objs, live: e.fresh, writable: e.writable, observed: e.observed}, true
}

// freshIDs lists the environments watched live now.
func (ix *Index) freshIDs() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var ids []string
	for _, e := range ix.order {
		if e.fresh {
			ids = append(ids, e.meta.ID)
		}
	}
	return ids
}

// render rebuilds e's view, encoding each class once for every query to
// come. The caller holds ix.mu for writing.
func (ix *Index) render(e *entry) {
	v := &envView{meta: e.meta, stale: !e.fresh, writable: e.writable, observed: e.observed, details: make([]detail, len(e.classes))}
	// The details' JSON shares one buffer, so a query copies it from
	// consecutive memory. It is allocated at its final size: every replica
	// keeps it for every environment of the fleet, and growing it by
	// appends left up to half of it unused.
	raws := make([][]byte, len(e.classes))
	size := 0
	headroom := capabilities.QuotaHeadroom(e.objs)
	for i, c := range e.classes {
		d := &v.details[i]
		d.Detail = Detail{EnvironmentID: e.meta.ID, Region: e.meta.Region, Zone: e.meta.Zone, Stale: v.stale, ObservedTime: e.observed, Class: c}
		d.facet = newFacet(c, v.stale)
		d.placement = newPlacementFacts(&d.Detail, headroom)
		d.nameID = ix.intern(c.Name)
		raw, err := json.Marshal(d.Detail)
		if err != nil {
			panic(fmt.Sprintf("fleet: encode class %s of %s: %v", c.Name, e.meta.ID, err)) // plain strings, bools and numbers
		}
		raws[i] = raw
		size += len(raw)
	}
	buf := make([]byte, 0, size)
	for i, raw := range raws {
		start := len(buf)
		buf = append(buf, raw...)
		v.details[i].json = buf[start:len(buf):len(buf)]
	}
	v.series = newClassSeries(e.meta, e.classes)
	e.view = v // classes come sorted by name from Describe
}

// intern returns a class name's number. The caller holds ix.mu for writing.
func (ix *Index) intern(name string) int {
	id, ok := ix.names[name]
	if !ok {
		id = len(ix.nameList)
		ix.names[name] = id
		ix.nameList = append(ix.nameList, name)
	}
	return id
}
