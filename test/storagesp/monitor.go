package storagesp

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// debounce is SP_MONITOR_DEBOUNCE_MS's default
// (internal/monitoring/debouncer.go).
const debounce = 500 * time.Millisecond

// failureReasons are the Warning events that turn a claim FAILED
// (internal/monitoring/k8s_events.go, handleWarningEvent).
var failureReasons = []string{"FailedBinding", "ProvisioningFailed", "FailedProvisioning", "AllocationFailed"}

// publisher sends each claim's status as the provider does: the last change
// of each instance within the debounce window, only when it differs from
// what was last published for it, never PROVISIONING after FAILED, as a
// core NATS publish on dcm.storage (internal/monitoring/monitor.go,
// submitIfChanged; debouncer.go; publisher.go).
type publisher struct {
	mu      sync.Mutex
	pending map[string]*pendingEvent
	last    map[string][2]string // status, message published
	failed  map[string]bool
	send    func(id, status, message string)
}

type pendingEvent struct {
	status, message string
	timer           *time.Timer
}

func (pub *publisher) submit(id, status, message string) {
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if pub.failed[id] && status == "PROVISIONING" {
		return
	}
	if status == "FAILED" {
		pub.failed[id] = true
	}
	if e := pub.pending[id]; e != nil {
		e.status, e.message = status, message
		return
	}
	e := &pendingEvent{status: status, message: message}
	pub.pending[id] = e
	e.timer = time.AfterFunc(debounce, func() { pub.fire(id) })
}

func (pub *publisher) fire(id string) {
	pub.mu.Lock()
	e := pub.pending[id]
	delete(pub.pending, id)
	if e == nil || pub.last[id] == [2]string{e.status, e.message} {
		pub.mu.Unlock()
		return
	}
	pub.last[id] = [2]string{e.status, e.message}
	if e.status == "DELETED" {
		delete(pub.last, id)
		delete(pub.failed, id)
	}
	pub.mu.Unlock()
	pub.send(id, e.status, e.message)
}

// flush publishes what is pending, as a stopping provider does.
func (pub *publisher) flush() {
	pub.mu.Lock()
	ids := make([]string, 0, len(pub.pending))
	for id, e := range pub.pending {
		e.timer.Stop()
		ids = append(ids, id)
	}
	pub.mu.Unlock()
	for _, id := range ids {
		pub.fire(id)
	}
}

// monitor follows the claims and their Warning events in the namespace
// until ctx ends, publishing their status (internal/monitoring/monitor.go,
// Start, handlePVCEvent, handlePVCDelete). The informers list everything
// at start, so every claim's current status is published on each start.
func (p *Provider) monitor(ctx context.Context) {
	conn, err := p.natsConn()
	if err != nil {
		p.t.Errorf("storagesp: NATS: %v", err)
		return
	}
	defer conn.Close()
	pub := &publisher{pending: map[string]*pendingEvent{}, last: map[string][2]string{}, failed: map[string]bool{},
		send: func(id, status, message string) {
			_ = conn.Publish("dcm.storage", p.event(id, status, message))
			_ = conn.Flush()
		}}
	claims := informers.NewSharedInformerFactoryWithOptions(p.Client, 10*time.Minute, informers.WithNamespace(p.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	pvcs := claims.Core().V1().PersistentVolumeClaims()
	observe := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Labels[instanceIDLabel] != "" {
			status, message := statusOf(pvc)
			pub.submit(pvc.Labels[instanceIDLabel], status, message)
		}
	}
	_, _ = pvcs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Labels[instanceIDLabel] != "" {
				status, message := statusOf(nil)
				pub.submit(pvc.Labels[instanceIDLabel], status, message)
			}
		},
	})
	events := informers.NewSharedInformerFactoryWithOptions(p.Client, 10*time.Minute, informers.WithNamespace(p.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "involvedObject.kind=PersistentVolumeClaim" }))
	_, _ = events.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			e, ok := obj.(*corev1.Event)
			if !ok || e.Type != corev1.EventTypeWarning || !slices.Contains(failureReasons, e.Reason) {
				return
			}
			pvc, err := pvcs.Lister().PersistentVolumeClaims(p.Namespace).Get(e.InvolvedObject.Name)
			if err != nil || pvc.Labels[instanceIDLabel] == "" {
				return
			}
			message := "PVC failure: " + e.Reason
			if e.Message != "" {
				message = e.Reason + ": " + e.Message
			}
			pub.submit(pvc.Labels[instanceIDLabel], "FAILED", message)
		},
	})
	claims.Start(ctx.Done())
	events.Start(ctx.Done())
	<-ctx.Done()
	claims.Shutdown()
	events.Shutdown()
	pub.flush()
}
