package fleet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
)

// Meta is what the registry says about an environment that the fleet view
// shows or needs.
type Meta struct {
	ID        string
	Region    string
	Zone      string
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
	// envs by id; ids sorted, so queries list environments in id order.
	envs map[string]*entry
	ids  []string
}

// entry is one environment: its inputs and the view built from them.
type entry struct {
	meta     Meta
	objs     capabilities.Objects // slimmed (capabilities.Slim)
	hasData  bool
	fresh    bool
	observed time.Time
	classes  []capabilities.Class
	view     *envView
}

// envView is an immutable rendering of an entry that queries share.
type envView struct {
	meta     Meta
	stale    bool
	observed time.Time
	details  []*detail // by class name
}

type detail struct {
	Detail
	json []byte
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{envs: map[string]*entry{}}
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
		e, ok := ix.envs[m.ID]
		switch {
		case !ok:
			e = &entry{meta: m}
			ix.envs[m.ID] = e
			added = append(added, m.ID)
		case reflect.DeepEqual(e.meta, m):
			continue
		default:
			e.meta = m
			e.classes = capabilities.Describe(e.objs, m.Overrides)
		}
		e.render()
	}
	for id := range ix.envs {
		if !keep[id] {
			delete(ix.envs, id)
		}
	}
	ix.ids = ix.ids[:0]
	for id := range ix.envs {
		ix.ids = append(ix.ids, id)
	}
	slices.Sort(ix.ids)
	return added
}

// Observe records live storage objects of an environment's cluster, read
// from its synced caches at `at`: the path every informer change takes. It
// reports whether what the environment shows changed (so it should be
// persisted); unknown environments are ignored.
func (ix *Index) Observe(id string, objs capabilities.Objects, at time.Time) (changed bool) {
	objs = capabilities.Slim(objs)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok {
		return false
	}
	classes := capabilities.Describe(objs, e.meta.Overrides)
	changed = !e.hasData || !reflect.DeepEqual(classes, e.classes)
	if !changed && e.fresh {
		e.objs = objs // same view; keep the newest objects
		return false
	}
	e.objs, e.classes, e.hasData, e.fresh, e.observed = objs, classes, true, true, at
	e.render()
	return changed
}

// MarkStale records that an environment's cluster cannot be watched since
// `at`; its last known classes stay, flagged stale.
func (ix *Index) MarkStale(id string, at time.Time) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok || !e.fresh {
		return
	}
	e.fresh = false
	if e.hasData {
		e.observed = at
	}
	e.render()
}

// Restore loads persisted objects observed at `observed` into an
// environment that has no data yet (after a restart); they show as stale
// until the cluster is watched again.
func (ix *Index) Restore(id string, objs capabilities.Objects, observed time.Time) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.envs[id]
	if !ok || e.hasData {
		return
	}
	e.objs, e.hasData, e.observed = objs, true, observed
	e.classes = capabilities.Describe(objs, e.meta.Overrides)
	e.render()
}

// snapshot returns what Store persists for an environment: its objects and
// when they were observed, if it has live data.
func (ix *Index) snapshot(id string) (capabilities.Objects, time.Time, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.envs[id]
	if !ok || !e.hasData {
		return capabilities.Objects{}, time.Time{}, false
	}
	return e.objs, e.observed, true
}

// freshIDs lists the environments watched live now.
func (ix *Index) freshIDs() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var ids []string
	for _, id := range ix.ids {
		if ix.envs[id].fresh {
			ids = append(ids, id)
		}
	}
	return ids
}

// render rebuilds e's view, encoding each class once for every query to
// come.
func (e *entry) render() {
	v := &envView{meta: e.meta, stale: !e.fresh, observed: e.observed, details: make([]*detail, 0, len(e.classes))}
	for _, c := range e.classes {
		d := &detail{Detail: Detail{EnvironmentID: e.meta.ID, Region: e.meta.Region, Zone: e.meta.Zone,
			Stale: v.stale, ObservedTime: e.observed, Class: c}}
		raw, err := json.Marshal(d.Detail)
		if err != nil {
			panic(fmt.Sprintf("fleet: encode class %s of %s: %v", c.Name, e.meta.ID, err)) // plain strings, bools and numbers
		}
		d.json = raw
		v.details = append(v.details, d)
	}
	e.view = v // classes come sorted by name from Describe
}
