package clusters

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// defaultFactsInterval is how often a connected cluster's CSIDrivers and
// CSIStorageCapacities are listed again when no StorageClass changed.
const defaultFactsInterval = 10 * time.Minute

// listed is a cache filled by listing, not watching: the CSIDrivers,
// CSIStorageCapacities, the default namespace's ResourceQuotas,
// VolumeSnapshotClasses and VolumeAttributesClasses, which only the fleet
// view and placement read and which change rarely. Watched, the first two
// held twelve goroutines and two streams per environment; listed on
// connect, after every StorageClass change (a new driver comes with new
// classes) and every factsInterval (or every few: see every), they cost a
// request each per interval and no goroutine in between.
type listed struct {
	name    string
	list    func(context.Context) ([]any, error)
	indexer cache.Indexer
	// optional caches may be forbidden to the gateway (credentials granted
	// before it read them): a refusal leaves them empty and denied, not
	// failing, and no failure of theirs holds back the cluster's sync or
	// health (a failed listing is still retried).
	optional bool
	denied   atomic.Bool
	// changed is called after a listing that changed what is cached (or
	// the first one).
	changed func()
	synced  atomic.Bool
	// every n > 1 lists the cache at every nth listing the interval alone
	// makes due; any other listing (connect, a StorageClass change, a
	// failure) lists it too.
	every int
}

// refresh lists the objects again and replaces what is cached. An
// optional cache may be refused (it is then empty and denied) or find its
// API not served (a cluster without the snapshot CRDs, or older than
// VolumeAttributesClasses: empty, and known to be). Neither is a failure,
// which would make every fact due again at each health check.
func (l *listed) refresh(ctx context.Context) error {
	if l.optional {
		ctx = optionalPermission(ctx)
	}
	objs, err := l.list(ctx)
	denied := l.optional && apierrors.IsForbidden(err)
	if denied || l.optional && apierrors.IsNotFound(err) {
		objs, err = nil, nil
	}
	if err != nil {
		if l.optional {
			l.synced.Store(true) // tried: what follows never waits for it
		}
		return err
	}
	deniedChanged := l.denied.Swap(denied) != denied
	for i, obj := range objs {
		objs[i] = stripUnused(obj)
	}
	before := versions(l.indexer.List())
	if err := l.indexer.Replace(objs, ""); err != nil {
		return err
	}
	if first := !l.synced.Swap(true); first || deniedChanged || !maps.Equal(before, versions(objs)) {
		l.changed()
	}
	return nil
}

// versions maps each object's uid to its resource version.
func versions(objs []any) map[string]string {
	v := make(map[string]string, len(objs))
	for _, obj := range objs {
		if m, err := meta.Accessor(obj); err == nil {
			v[string(m.GetUID())] = m.GetResourceVersion()
		}
	}
	return v
}

// facts are a cluster's listed caches and when to list them again.
type facts struct {
	caches   []*listed
	interval time.Duration

	mu       sync.Mutex
	listedAt time.Time // the last listing
	wanted   bool      // a StorageClass changed since
	busy     bool      // a listing is in flight
	// periodic counts the listings the interval alone made due.
	periodic int
}

// want asks for a listing at the next chance: a StorageClass changed, or
// the gateway changed what its claims request.
func (f *facts) want() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wanted = true
}

// due reports whether a listing should start now and, if so, marks one in
// flight and says which: the number of a listing the interval alone made
// due, or 0 for one of every cache.
func (f *facts) due(now time.Time) (periodic int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy || !f.wanted && !f.listedAt.IsZero() && now.Sub(f.listedAt) < f.interval {
		return 0, false
	}
	if !f.wanted && !f.listedAt.IsZero() {
		f.periodic++
		periodic = f.periodic
	}
	f.busy, f.wanted = true, false
	return periodic, true
}

// refresh runs the listing due reported, within timeout, and records when
// it succeeded; a failure leaves a listing of every cache due.
func (f *facts) refresh(ctx context.Context, timeout time.Duration, periodic int) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	for _, l := range f.caches {
		if periodic == 0 || l.every <= 1 || periodic%l.every == 0 {
			errs = append(errs, l.refresh(ctx))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = false
	if errors.Join(errs...) == nil {
		f.listedAt = time.Now()
	} else {
		f.wanted = true
	}
}
