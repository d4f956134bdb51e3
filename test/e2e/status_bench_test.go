package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/dcm-project/storage-gateway/test/gatewaytest"
	"github.com/dcm-project/storage-gateway/test/natstest"
)

// statusBench is a bound volume whose status the benchmark flips between
// RUNNING and PROVISIONING by setting and clearing its Resizing condition
// (what an external resizer does), watched by the benchmark.
type statusBench struct {
	b       *testing.B
	claims  func() (*corev1.PersistentVolumeClaim, error)
	update  func(*corev1.PersistentVolumeClaim) error
	watched chan time.Time // the benchmark's watch saw a change
	events  chan string    // statuses of the volume's CloudEvents, as they arrive
	arrived chan time.Time // ... and when
	// baseline receives the arrival times of the baseline provider's
	// messages: a second watch that publishes straight to NATS, from memory.
	baseline chan time.Time
}

func newStatusBench(b *testing.B) *statusBench {
	r := startReporting(b, gatewaytest.Options{})
	c, east := r.client, clusters[0]
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	id := uuid.NewString()
	code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+id, map[string]any{"spec": storageSpec("bench", "1Gi", nil)})
	c.want(http.StatusCreated, code, body)
	c.waitStatus(envID, id, "RUNNING", time.Minute)

	s := &statusBench{b: b, watched: make(chan time.Time, 64), events: make(chan string, 64),
		arrived: make(chan time.Time, 64), baseline: make(chan time.Time, 64)}
	admin := east.AdminClient().CoreV1().PersistentVolumeClaims(ns)
	s.claims = func() (*corev1.PersistentVolumeClaim, error) {
		return admin.Get(context.Background(), id, metav1.GetOptions{})
	}
	s.update = func(p *corev1.PersistentVolumeClaim) error {
		_, err := admin.UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	}
	s.watch(ns, id)
	s.subscribe(r.nats.URL, id)
	s.startBaseline(r.nats.URL, ns, id)
	s.refill(time.Second) // the flap tokens of the volume's creation are back
	return s
}

// watch reports every change the API server announces for the claim.
func (s *statusBench) watch(ns, name string) {
	s.b.Helper()
	w := s.openWatch(ns, name)
	go func() {
		for e := range w.ResultChan() {
			if e.Type == watch.Modified {
				s.watched <- time.Now()
			}
		}
	}()
}

// openWatch watches one claim with its own connection.
func (s *statusBench) openWatch(ns, name string) watch.Interface {
	s.b.Helper()
	cs, err := kubernetes.NewForConfig(clusters[0].AdminConfig())
	if err != nil {
		s.b.Fatal(err)
	}
	w, err := cs.CoreV1().PersistentVolumeClaims(ns).Watch(context.Background(),
		metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		s.b.Fatal(err)
	}
	s.b.Cleanup(w.Stop)
	return w
}

// subscribe reports the volume's CloudEvents as they reach NATS.
func (s *statusBench) subscribe(url, id string) {
	s.b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		s.b.Fatal(err)
	}
	s.b.Cleanup(nc.Close)
	if _, err := nc.Subscribe("dcm.storage", func(m *nats.Msg) {
		at := time.Now()
		var e natstest.Event
		if json.Unmarshal(m.Data, &e) == nil && e.Data.ID == id {
			s.events <- e.Data.Status
			s.arrived <- at
		}
	}); err != nil {
		s.b.Fatal(err)
	}
}

// startBaseline runs the simplest watch-based provider there is: its own
// watch on the claim, publishing every change to NATS at once, with no
// cache, database or debounce — the floor the gateway is compared with.
func (s *statusBench) startBaseline(url, ns, name string) {
	s.b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		s.b.Fatal(err)
	}
	s.b.Cleanup(nc.Close)
	if _, err := nc.Subscribe("bench.baseline", func(*nats.Msg) { s.baseline <- time.Now() }); err != nil {
		s.b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		s.b.Fatal(err)
	}
	w := s.openWatch(ns, name)
	go func() {
		for e := range w.ResultChan() {
			if e.Type == watch.Modified {
				_ = nc.Publish("bench.baseline", nil)
			}
		}
	}()
}

// refill lets the claim's flap budget fill up again for d, off the clock
// (the tracker's tokens come back with time alone; nothing tells when).
func (s *statusBench) refill(d time.Duration) {
	s.b.StopTimer()
	defer s.b.StartTimer()
	time.Sleep(d)
}

// quiet forgets what the watches and NATS reported so far.
func (s *statusBench) quiet() {
	for len(s.watched) > 0 {
		<-s.watched
	}
	for len(s.baseline) > 0 {
		<-s.baseline
	}
	for len(s.events) > 0 {
		<-s.events
		<-s.arrived
	}
}

// flip sets (resizing) or clears the claim's Resizing condition.
func (s *statusBench) flip(resizing bool) {
	s.b.Helper()
	pvc, err := s.claims()
	if err != nil {
		s.b.Fatal(err)
	}
	pvc.Status.Conditions = nil
	if resizing {
		pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue}}
	}
	if err := s.update(pvc); err != nil {
		s.b.Fatal(err)
	}
}

// BenchmarkStatusLatency measures, with default settings,
// the delay from a PVC status change in the API server — the moment a watch
// sees it — to its CloudEvent on NATS. Each change follows a quiet second,
// as real transitions do. Reports p50/p99 in ms and,
// as ratios, against a baseline measured in the same run: a bare watch that
// publishes from memory (no cache, database, outbox or debounce), and the
// 500 ms window a trailing-edge provider holds every transition for.
//
//	go test ./test/e2e -run '^$' -bench StatusLatency -benchtime 40x
func BenchmarkStatusLatency(b *testing.B) {
	s := newStatusBench(b)
	var delays, floor []time.Duration
	b.ResetTimer()
	for i := range b.N {
		resizing := i%2 == 0
		want := map[bool]string{true: "PROVISIONING", false: "RUNNING"}[resizing]
		s.quiet()
		s.flip(resizing)
		seen := s.next(s.watched)
		floor = append(floor, s.next(s.baseline).Sub(seen))
		for {
			var status string
			select {
			case status = <-s.events:
			case <-time.After(30 * time.Second):
				b.Fatalf("no %s event within 30s", want)
			}
			at := <-s.arrived
			if status == want {
				delays = append(delays, at.Sub(seen))
				break
			}
		}
		s.refill(time.Second)
	}
	b.StopTimer()
	reportEventLatency(b, delays, floor)
}

// next waits (boundedly) for the next time on ch.
func (s *statusBench) next(ch <-chan time.Time) time.Time {
	s.b.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(30 * time.Second):
		s.b.Fatal("no change seen within 30s")
		return time.Time{}
	}
}

// reportEventLatency reports status-event delays as p50 and p99 and the
// p99 as ratios against the bare watch's, measured in the
// same run, and against the 500 ms a trailing-edge debounce holds an event.
func reportEventLatency(b *testing.B, delays, floor []time.Duration) {
	b.Helper()
	p50, p99 := percentiles(delays)
	_, floor99 := percentiles(floor)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(p99)/float64(floor99), "p99/bare-watch")
	b.ReportMetric(float64(p99)/float64(500*time.Millisecond), "p99/window")
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}

// BenchmarkFlappingClaim flips a claim's status 10 times within 200 ms,
// starting on RUNNING, and counts the CloudEvents DCM receives for each
// burst: at most 3 (two changes at once, the final status when a flap token
// is back), the last one the final status. Bursts alternate between ending
// on RUNNING and on PROVISIONING.
//
//	go test ./test/e2e -run '^$' -bench FlappingClaim -benchtime 40x
func BenchmarkFlappingClaim(b *testing.B) {
	s := newStatusBench(b)
	total, most := 0, 0
	for burst := range b.N {
		endRunning := burst%2 == 0
		final := map[bool]string{true: "RUNNING", false: "PROVISIONING"}[endRunning]
		s.quiet()
		for i := range 10 {
			s.flip(i%2 == 0 || i == 9 && !endRunning)
			time.Sleep(20 * time.Millisecond)
		}
		var got []string
		deadline := time.After(1500 * time.Millisecond)
	collect:
		for {
			select {
			case st := <-s.events:
				<-s.arrived
				got = append(got, st)
			case <-deadline:
				break collect
			}
		}
		if len(got) == 0 || got[len(got)-1] != final {
			b.Errorf("burst %d reported %v; want the last %s", burst, got, final)
		}
		total, most = total+len(got), max(most, len(got))
		if !endRunning { // back to RUNNING, and the flap tokens back, before the next burst
			s.flip(false)
			s.refill(1500 * time.Millisecond)
		}
	}
	b.ReportMetric(float64(total)/float64(b.N), "events/burst")
	b.ReportMetric(float64(most), "max-events/burst")
}

// boundBench follows the claims of a namespace and the volumes' RUNNING
// CloudEvents: for each volume id, when a watch saw its claim Bound, when a
// bare watch republished that to NATS (the floor), and when the gateway's
// RUNNING event arrived.
type boundBench struct {
	mu                       sync.Mutex
	bound, baseline, running map[string]chan time.Time
}

func (s *boundBench) expect(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bound[id], s.baseline[id], s.running[id] = make(chan time.Time, 1), make(chan time.Time, 1), make(chan time.Time, 1)
}

// mark records the first time of id in one of the maps.
func (s *boundBench) mark(m map[string]chan time.Time, id string, at time.Time) {
	s.mu.Lock()
	ch := m[id]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- at:
		default: // seen before
		}
	}
}

// BenchmarkBoundToRunning measures the real create path at default
// settings: a volume created through the API, the moment a watch sees its
// claim Bound, to the RUNNING CloudEvent on NATS (a normal lifecycle is
// never held by the flap budget) — on a quiet machine,
// and on a busy one (busyMachine: a core spinning, a writer fsyncing: the
// disk Postgres flushes its WAL to is shared). Baselines from the same
// run: a bare watch that republishes Bound to NATS from memory (no cache,
// database, outbox), and the 500 ms a trailing-edge debounce holds a
// transition for.
//
//	go test ./test/e2e -run '^$' -bench BoundToRunning -benchtime 40x
func BenchmarkBoundToRunning(b *testing.B) {
	b.Run("quiet", func(b *testing.B) { boundToRunning(b, false) })
	b.Run("busy", func(b *testing.B) { boundToRunning(b, true) })
}

// busyMachine keeps one core busy and the disk flushing until the
// benchmark ends: a goroutine on its own thread spinning, and one writing
// and fsyncing 64 KiB blocks to a file.
func busyMachine(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for n := 0; ctx.Err() == nil; n++ {
			_ = n * n
		}
	})
	wg.Go(func() {
		f, err := os.Create(filepath.Join(b.TempDir(), "fsync-load"))
		if err != nil {
			b.Error(err)
			return
		}
		defer func() { _ = f.Close() }()
		block := make([]byte, 64<<10)
		for i := 0; ctx.Err() == nil; i++ {
			if i%256 == 0 { // a 16 MiB file, rewritten
				if _, err := f.Seek(0, 0); err != nil {
					b.Error(err)
					return
				}
			}
			if _, err := f.Write(block); err != nil {
				b.Error(err)
				return
			}
			if err := f.Sync(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func boundToRunning(b *testing.B, busy bool) {
	r := startReporting(b, gatewaytest.Options{})
	c, east := r.client, clusters[0]
	envID, ns := east.Spec.Environment.ID, east.Spec.Environment.Namespace
	s := &boundBench{bound: map[string]chan time.Time{}, baseline: map[string]chan time.Time{}, running: map[string]chan time.Time{}}

	nc, err := nats.Connect(r.nats.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	if _, err := nc.Subscribe("dcm.storage", func(m *nats.Msg) {
		at := time.Now()
		var e natstest.Event
		if json.Unmarshal(m.Data, &e) == nil && e.Data.Status == "RUNNING" {
			s.mark(s.running, e.Data.ID, at)
		}
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := nc.Subscribe("bench.bound", func(m *nats.Msg) { s.mark(s.baseline, string(m.Data), time.Now()) }); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(east.AdminConfig())
	if err != nil {
		b.Fatal(err)
	}
	w, err := cs.CoreV1().PersistentVolumeClaims(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	go func() {
		for e := range w.ResultChan() {
			if pvc, ok := e.Object.(*corev1.PersistentVolumeClaim); ok && pvc.Status.Phase == corev1.ClaimBound {
				s.mark(s.bound, pvc.Name, time.Now())
				_ = nc.Publish("bench.bound", []byte(pvc.Name))
			}
		}
	}()

	wait := func(m map[string]chan time.Time, id, what string) time.Time {
		s.mu.Lock()
		ch := m[id]
		s.mu.Unlock()
		select {
		case at := <-ch:
			return at
		case <-time.After(30 * time.Second):
			b.Fatalf("%s of %s not within 30s", what, id)
			return time.Time{}
		}
	}
	if busy {
		busyMachine(b)
	}
	var delays, floor []time.Duration
	b.ResetTimer()
	for range b.N {
		id := uuid.NewString()
		s.expect(id)
		code, body := c.do(http.MethodPost, volumesPath(envID)+"?id="+id, map[string]any{"spec": storageSpec("bound", "1Gi", nil)})
		c.want(http.StatusCreated, code, body)
		seen := wait(s.bound, id, "Bound")
		delays = append(delays, wait(s.running, id, "RUNNING event").Sub(seen))
		floor = append(floor, wait(s.baseline, id, "bare watch").Sub(seen))
		b.StopTimer()
		code, body = c.do(http.MethodDelete, volumesPath(envID)+"/"+id, nil)
		c.want(http.StatusNoContent, code, body)
		b.StartTimer()
	}
	b.StopTimer()
	reportEventLatency(b, delays, floor)
}
