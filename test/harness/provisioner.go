package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// StorageClass parameters that inject failures into the harness provisioner.
const (
	// ParamFailTimes makes the first N provisioning attempts of each claim fail.
	ParamFailTimes = "harness.storage-gateway.dcm.project/fail-times"
	// ParamFail set to "always" makes every provisioning attempt fail.
	ParamFail = "harness.storage-gateway.dcm.project/fail"
	// ParamDelay makes each provisioning attempt take this long (a Go duration).
	ParamDelay = "harness.storage-gateway.dcm.project/delay"
	// ParamResizeDelay is how long an expansion stays in progress (default 500ms).
	ParamResizeDelay = "harness.storage-gateway.dcm.project/resize-delay"

	harnessParamPrefix = "harness.storage-gateway.dcm.project/"
	defaultResizeDelay = 500 * time.Millisecond
)

// provisioner emulates one CSI driver's controller side for the
// sig-storage-lib-external-provisioner controller: it "creates" a volume by
// returning a CSI PersistentVolume, refuses modes the driver lacks and obeys
// the failure-injection parameters. The library emits the real Provisioning,
// ProvisioningSucceeded and ProvisioningFailed events.
type provisioner struct {
	driver Driver

	mu       sync.Mutex
	attempts map[types.UID]int
}

var _ controller.BlockProvisioner = (*provisioner)(nil)

func newProvisioner(d Driver) *provisioner {
	return &provisioner{driver: d, attempts: map[types.UID]int{}}
}

// SupportsBlock lets the library hand Block claims to drivers that take them.
func (p *provisioner) SupportsBlock(context.Context) bool {
	return p.driver.supportsVolumeMode(corev1.PersistentVolumeBlock)
}

func (p *provisioner) Provision(ctx context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	params := opts.StorageClass.Parameters
	attempt := p.countAttempt(opts.PVC.UID)

	if d, ok := params[ParamDelay]; ok {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return nil, controller.ProvisioningFinished, fmt.Errorf("parameter %s: %w", ParamDelay, err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, controller.ProvisioningFinished, ctx.Err()
		}
	}
	if params[ParamFail] == "always" {
		return nil, controller.ProvisioningFinished, fmt.Errorf("injected failure: backend rejected volume (attempt %d)", attempt)
	}
	if n, ok := params[ParamFailTimes]; ok {
		limit, err := strconv.Atoi(n)
		if err != nil {
			return nil, controller.ProvisioningFinished, fmt.Errorf("parameter %s: %w", ParamFailTimes, err)
		}
		if attempt <= limit {
			return nil, controller.ProvisioningFinished, fmt.Errorf("injected failure: backend busy (attempt %d of %d failing)", attempt, limit)
		}
	}

	for _, m := range opts.PVC.Spec.AccessModes {
		if !p.driver.supportsAccessMode(m) {
			return nil, controller.ProvisioningFinished, fmt.Errorf("driver %s does not support access mode %s", p.driver.Name, m)
		}
	}
	mode := corev1.PersistentVolumeFilesystem
	if opts.PVC.Spec.VolumeMode != nil {
		mode = *opts.PVC.Spec.VolumeMode
	}
	if !p.driver.supportsVolumeMode(mode) {
		return nil, controller.ProvisioningFinished, fmt.Errorf("driver %s does not support volume mode %s", p.driver.Name, mode)
	}

	size, ok := opts.PVC.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil, controller.ProvisioningFinished, errors.New("claim has no storage request")
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	attrs := maps.Clone(params)
	maps.DeleteFunc(attrs, func(k, _ string) bool {
		return strings.HasPrefix(k, harnessParamPrefix) || strings.HasPrefix(k, "csi.storage.k8s.io/")
	})
	fsType := ""
	if mode == corev1.PersistentVolumeFilesystem {
		fsType = "ext4"
	}
	p.forget(opts.PVC.UID)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   opts.PVC.Spec.AccessModes,
			VolumeMode:                    &mode,
			MountOptions:                  opts.StorageClass.MountOptions,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{
					Driver:           p.driver.Name,
					VolumeHandle:     "harness-" + opts.PVName,
					FSType:           fsType,
					VolumeAttributes: attrs,
				},
			},
		},
	}, controller.ProvisioningFinished, nil
}

// Delete has no backend to clean up; the library deletes the PV object.
func (p *provisioner) Delete(context.Context, *corev1.PersistentVolume) error { return nil }

func (p *provisioner) countAttempt(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts[uid]++
	return p.attempts[uid]
}

func (p *provisioner) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.attempts, uid)
}

// runProvisioners runs one library controller per emulated driver it is
// given (startEmulatedDrivers gives it no plugins: the external-provisioner
// serves those) until ctx ends. Retries are fast (tests wait on them) but
// still back off.
func runProvisioners(ctx context.Context, client kubernetes.Interface, drivers []Driver) {
	var wg sync.WaitGroup
	for _, d := range drivers {
		pc := controller.NewProvisionController(ctx, client, d.Name, newProvisioner(d),
			controller.LeaderElection(false),
			controller.Threadiness(2),
			controller.FailedProvisionThreshold(0),
			controller.ResyncPeriod(30*time.Second),
			controller.CreateProvisionedPVInterval(time.Second),
			controller.RateLimiter(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second)),
		)
		wg.Go(func() { pc.Run(ctx) })
	}
	wg.Wait()
}

// quantityOf returns the storage quantity in a resource list (zero if unset).
func quantityOf(l corev1.ResourceList) resource.Quantity {
	return l[corev1.ResourceStorage]
}
