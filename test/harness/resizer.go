package harness

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// resizer plays the external-resizer sidecar for the emulated drivers (the
// real one serves the plugins): when a bound claim asks for more than its
// capacity it sets the Resizing condition, waits the class's resize delay,
// grows the PV, then records the new capacity on the claim and clears the
// condition — the same object changes a real resizer makes for a volume
// that needs no node-side expansion.
type resizer struct {
	client   kubernetes.Interface
	drivers  map[string]bool // the emulated drivers it was given: no plugins
	claims   listerscorev1.PersistentVolumeClaimLister
	volumes  listerscorev1.PersistentVolumeLister
	classes  func(name string) (map[string]string, error)
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	// started records when each claim's current expansion began, at full
	// precision (condition timestamps are whole seconds). Only the single
	// worker goroutine touches it.
	started map[types.UID]time.Time
}

func runResizer(ctx context.Context, client kubernetes.Interface, drivers []Driver) {
	factory := informers.NewSharedInformerFactory(client, 30*time.Second)
	claimInformer := factory.Core().V1().PersistentVolumeClaims()
	classLister := factory.Storage().V1().StorageClasses().Lister()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	r := &resizer{
		client:  client,
		drivers: map[string]bool{},
		claims:  claimInformer.Lister(),
		volumes: factory.Core().V1().PersistentVolumes().Lister(),
		classes: func(name string) (map[string]string, error) {
			sc, err := classLister.Get(name)
			if err != nil {
				return nil, err
			}
			return sc.Parameters, nil
		},
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Second)),
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "harness-resizer"}),
		started:  map[types.UID]time.Time{},
	}
	for _, d := range drivers {
		r.drivers[d.Name] = true
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	_, _ = claimInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() { <-ctx.Done(); r.queue.ShutDown() }()
	for r.processNext(ctx) {
	}
	factory.Shutdown()
}

func (r *resizer) processNext(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	requeueAfter, err := r.sync(ctx, key)
	switch {
	case err != nil:
		r.queue.AddRateLimited(key)
	case requeueAfter > 0:
		r.queue.Forget(key)
		r.queue.AddAfter(key, requeueAfter)
	default:
		r.queue.Forget(key)
	}
	return true
}

// sync advances one claim's expansion by one step and says when to look again.
func (r *resizer) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pvc, err := r.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil || pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return 0, nil
	}
	want, have := quantityOf(pvc.Spec.Resources.Requests), quantityOf(pvc.Status.Capacity)
	if want.Cmp(have) <= 0 {
		delete(r.started, pvc.UID)
		return 0, nil
	}
	pv, err := r.volumes.Get(pvc.Spec.VolumeName)
	if err != nil || pv.Spec.CSI == nil || !r.drivers[pv.Spec.CSI.Driver] {
		return 0, nil
	}

	delay := defaultResizeDelay
	if pvc.Spec.StorageClassName != nil {
		if params, err := r.classes(*pvc.Spec.StorageClassName); err == nil && params[ParamResizeDelay] != "" {
			if d, err := time.ParseDuration(params[ParamResizeDelay]); err == nil {
				delay = d
			}
		}
	}

	started, ok := r.started[pvc.UID]
	if !ok || resizingSince(pvc).IsZero() {
		claim := pvc.DeepCopy()
		claim.Status.Conditions = append(claim.Status.Conditions, corev1.PersistentVolumeClaimCondition{
			Type:               corev1.PersistentVolumeClaimResizing,
			Status:             corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(),
		})
		if _, err := r.client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
			return 0, err
		}
		r.recorder.Eventf(pvc, corev1.EventTypeNormal, "Resizing", "External resizer is resizing volume %s", pv.Name)
		r.started[pvc.UID] = time.Now()
		return delay, nil
	}
	if wait := delay - time.Since(started); wait > 0 {
		return wait, nil
	}

	if got := quantityOf(pv.Spec.Capacity); got.Cmp(want) < 0 {
		vol := pv.DeepCopy()
		vol.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := r.client.CoreV1().PersistentVolumes().Update(ctx, vol, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("grow PV %s: %w", pv.Name, err)
		}
	}
	claim := pvc.DeepCopy()
	claim.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: want}
	claim.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
	claim.Status.AllocatedResourceStatuses = nil
	conditions := claim.Status.Conditions[:0]
	for _, c := range claim.Status.Conditions {
		if c.Type != corev1.PersistentVolumeClaimResizing && c.Type != corev1.PersistentVolumeClaimFileSystemResizePending {
			conditions = append(conditions, c)
		}
	}
	claim.Status.Conditions = conditions
	if _, err := r.client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	r.recorder.Eventf(pvc, corev1.EventTypeNormal, "VolumeResizeSuccessful", "Resize volume succeeded")
	delete(r.started, pvc.UID)
	return 0, nil
}

func resizingSince(pvc *corev1.PersistentVolumeClaim) time.Time {
	for _, c := range pvc.Status.Conditions {
		if c.Type == corev1.PersistentVolumeClaimResizing && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
