package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/forwarding"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
	"github.com/dcm-project/storage-gateway/test/ports"
)

// replicaTenants is how many tenant environments the replica test spreads
// over the two harness clusters.
const replicaTenants = 200

// takeoverBound is how long a dead replica's environments may take to be
// owned again and READY, with the default 5 s lease (deploy/README.md,
// Replicas): a lease and a heartbeat, and the new owners' connects.
const takeoverBound = 10 * time.Second

// replicaSet runs gateway binaries as replicas of one fleet: one database,
// one NATS, one key ring and token file; each replica has its member id and
// advertises its own address.
type replicaSet struct {
	t      testing.TB
	binary string
	env    []string
	db     *pgxpool.Pool
	procs  map[string]*gatewayproc.Process
}

// newReplicaSet prepares replicas on a new database with settings (none
// runs yet). Registering a fleet is an admin burst the production
// per-principal limit (5/s) would stretch to minutes.
func newReplicaSet(tb testing.TB, settings ...string) *replicaSet {
	tb.Helper()
	database := pgtest.NewDatabase(tb)
	db, err := postgres.Open(tb.Context(), database.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	binary := gatewayproc.Binary(tb)
	return &replicaSet{t: tb, binary: binary, db: db, procs: map[string]*gatewayproc.Process{},
		env: gatewayproc.Env(tb, binary, append([]string{"SG_DATABASE_URL=" + database.URL, "SG_ALLOWED_CLUSTER_CIDRS=127.0.0.0/8",
			"SG_ADMIN_WRITE_RATE=1000", "SG_ADMIN_WRITE_BURST=1000"}, settings...)...)}
}

func (s *replicaSet) start(id string) client {
	s.t.Helper()
	s.startAll(id)
	return s.client(id)
}

// startAll starts replicas at once, as an orchestrator restarting a
// deployment does, and waits until each listens.
func (s *replicaSet) startAll(ids ...string) {
	s.t.Helper()
	envs := make([][]string, len(ids))
	for i, id := range ids {
		addr := "127.0.0.1:" + strconv.Itoa(ports.Free(s.t))
		envs[i] = append(slices.Clone(s.env), "SG_MEMBER_ID="+id, "SG_LISTEN_ADDR="+addr, "SG_ADVERTISE_URL=http://"+addr)
	}
	for i, p := range gatewayproc.StartAll(s.t, s.binary, envs) {
		s.procs[ids[i]] = p
	}
}

func (s *replicaSet) client(id string) client {
	p := s.procs[id]
	return client{t: s.t, base: "http://" + p.Addr, token: p.Token()}
}

// live are the replicas running now, by id.
func (s *replicaSet) live() []string { return slices.Sorted(maps.Keys(s.procs)) }

// kill ends replicas with sig, all at once, and waits until they exited
// (SIGKILL: no goodbye; SIGTERM: each leaves).
func (s *replicaSet) kill(sig syscall.Signal, ids ...string) {
	s.t.Helper()
	for _, id := range ids {
		if err := s.procs[id].Cmd.Process.Signal(sig); err != nil {
			s.t.Fatal(err)
		}
	}
	for _, id := range ids {
		if err := <-s.procs[id].Done; sig == syscall.SIGTERM && err != nil {
			s.t.Fatalf("replica %s did not stop cleanly: %v", id, err)
		}
		delete(s.procs, id)
	}
}

// pause freezes replica id (SIGSTOP) until every thread of it stopped,
// or thaws it.
func (s *replicaSet) pause(id string, frozen bool) {
	s.t.Helper()
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	p := s.procs[id]
	if err := p.Cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
	if frozen {
		// The stop takes effect thread by thread: a request sent before
		// the last one stopped could still be served.
		poll.Until(s.t, 5*time.Second, "every thread of replica "+id+" stopped", func() bool { return allStopped(p.Cmd.Process.Pid) })
	}
}

// owners reads who owns each environment, counting only live owners (a
// member whose heartbeat is within the lease, in the incarnation that
// claimed it); an environment without one maps to "".
func (s *replicaSet) owners() map[string]string {
	s.t.Helper()
	rows, err := s.db.Query(s.t.Context(), `SELECT e.id, coalesce(m.id, '') FROM environments e
		LEFT JOIN environment_owners o ON o.environment_id = e.id
		LEFT JOIN members m ON m.id = o.member_id AND m.incarnation = o.incarnation
			AND m.heartbeat_time >= now() - interval '5 seconds'`)
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	var env, member string
	if _, err := pgx.ForEachRow(rows, []any{&env, &member}, func() error {
		out[env] = member
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// settled waits until every environment is owned by the running replica
// the assignment names, live, and each replica's pool holds exactly the
// environments it owns, READY and synced; it checks no replica owns more
// than 1.25 × the mean and returns the owners.
func (s *replicaSet) settled(within time.Duration) map[string]string {
	s.t.Helper()
	var owners map[string]string
	var last string
	poll.UntilEvery(s.t, s.settledPollInterval(), within, "every environment owned once and connected by its owner", func() bool {
		owners = s.owners()
		counts := map[string]int{}
		for _, m := range owners {
			counts[m]++
		}
		last = fmt.Sprint(counts)
		// Converged: every environment where the assignment over the
		// running replicas puts it (hand-overs under way are not done).
		if !maps.Equal(owners, membership.Assign(slices.Collect(maps.Keys(owners)), s.live(), nil)) {
			return false
		}
		for _, id := range s.live() {
			metrics := scrape(s.t, s.client(id), "storage_gateway_cluster_connections")
			ready := metrics.value("storage_gateway_cluster_connections", "state", "READY", "synced", "true")
			all := metrics.sum("storage_gateway_cluster_connections")
			if int(ready) != counts[id] || int(all) != counts[id] {
				last = fmt.Sprintf("%v; %s connects %v (%v ready)", counts, id, all, ready)
				return false
			}
		}
		return len(counts) == len(s.live())
	})
	counts := map[string]int{}
	for _, m := range owners {
		counts[m]++
	}
	mean := float64(len(owners)) / float64(len(counts))
	for id, n := range counts {
		if float64(n) > 1.25*mean {
			s.t.Fatalf("%s owns %d environments, more than 1.25 × the mean %.1f (%v)", id, n, mean, counts)
		}
	}
	s.t.Logf("settled: %s", last)
	return owners
}

// settledPollInterval is how often settled looks: every 50 ms, or for a
// large fleet once per 10,000 environments a second. Each look reads every
// owner and scrapes every replica, whose metrics name each environment: at
// 10,000 environments every 50 ms, that took a third of a replica's CPU
// while it was reconnecting the fleet, and slowed down what it measured.
func (s *replicaSet) settledPollInterval() time.Duration {
	var n int
	if err := s.db.QueryRow(s.t.Context(), `SELECT count(*) FROM environments`).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return max(50*time.Millisecond, time.Duration(n)*time.Second/10000)
}

// moved counts environments whose owner differs, and fails the test if
// more than 1/members + 5 % moved.
func moved(t *testing.T, before, after map[string]string, members int) {
	t.Helper()
	n := 0
	for env, owner := range after {
		if before[env] != owner {
			n++
		}
	}
	bound := float64(len(after)) * (1/float64(members) + 0.05)
	t.Logf("%d of %d environments moved (bound %.0f)", n, len(after), bound)
	if float64(n) > bound {
		t.Fatalf("%d environments moved, more than 1/%d + 5 %% of %d", n, members, len(after))
	}
}

// ownedBy lists the environments owner owns, sorted.
func ownedBy(owners map[string]string, owner string) []string {
	var out []string
	for env, m := range owners {
		if m == owner {
			out = append(out, env)
		}
	}
	slices.Sort(out)
	return out
}

// tenantVolume is a volume the test created in a tenant environment.
type tenantVolume struct {
	env, namespace, id string
	cluster            *harness.Cluster
}

// TestReplicasShareTheFleet runs three gateway binaries on one database
// over 200 tenant environments (each its own namespace and least-privilege
// token on one of the two harness clusters) and proves what
// deploy/README.md promises of replicas:
// ownership balanced and each environment connected by one replica only;
// any replica answers for any environment (forwarding to the owner); a
// SIGKILLed replica's environments owned again and READY within 10 s with
// every status change meanwhile reported once; scaling 2 → 3 → 2 moves
// at most 1/N + 5 %; a replica frozen (SIGSTOP) past its lease writes
// nothing once resumed; and every replica stopped at once and started
// again owns and connects the whole fleet again.
func TestReplicasShareTheFleet(t *testing.T) {
	t.Parallel()
	natsServer := natstest.Start(t)
	stream := natsServer.DCMStream()
	set := newReplicaSet(t, "SG_NATS_URL="+natsServer.URL, "SG_LOG_LEVEL=debug")
	var err error
	tenants := make([][]harness.Tenant, len(clusters))
	for i, c := range clusters {
		if tenants[i], err = c.Tenants(t.Context(), "replica", replicaTenants/len(clusters)); err != nil {
			t.Fatal(err)
		}
	}
	a := set.start("a")
	set.start("b")
	set.start("c")
	registerTenants(t, a, tenants)
	owners := set.settled(2 * time.Minute)
	if len(owners) != replicaTenants {
		t.Fatalf("%d environments registered, want %d", len(owners), replicaTenants)
	}
	stopSampling := sampleOwnership(t, set)

	// Any replica answers for any environment: each replica creates a
	// volume in environments the others own (forwarded), and reads them.
	var volumes []tenantVolume
	for _, via := range set.live() {
		for _, owner := range set.live() {
			if owner == via {
				continue
			}
			for _, env := range ownedBy(owners, owner)[:2] {
				v := tenantVolumeIn(env)
				code, body := set.client(via).do(http.MethodPost, volumesPath(env)+"?id="+v.id, map[string]any{"spec": storageSpec("r", "1Gi", nil)})
				set.client(via).want(http.StatusCreated, code, body)
				volumes = append(volumes, v)
			}
		}
	}
	want := map[string][]string{}
	for i, v := range volumes {
		reader := set.client(set.live()[i%len(set.live())])
		reader.waitStatus(v.env, v.id, "RUNNING", time.Minute)
		want[v.id] = []string{"PROVISIONING", "RUNNING"}
	}
	for _, v := range volumes {
		waitEvents(t, stream, v.id, want[v.id], time.Minute)
	}
	sameFleetViews(t, set)
	registryChangeSeenEverywhere(t, set, owners)
	specChangeDecidesTheNextCreate(t, set, owners)

	// SIGKILL b: its environments are owned again and READY within the
	// bound; claims deleted meanwhile are reported DELETED once; requests
	// for its environments meanwhile succeed or answer 503 with Retry-After.
	var gone []tenantVolume
	for _, v := range volumes {
		if owners[v.env] == "b" {
			gone = append(gone, v)
		}
	}
	killed := time.Now()
	set.kill(syscall.SIGKILL, "b")
	for _, v := range gone[:2] {
		if err := v.cluster.AdminClient().CoreV1().PersistentVolumeClaims(v.namespace).Delete(t.Context(), v.id, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		want[v.id] = append(want[v.id], "DELETED")
	}
	answered := askDuringTakeover(t, set, gone[2:])
	after := set.settled(time.Minute)
	took := time.Since(killed)
	t.Logf("takeover after SIGKILL: %s; meanwhile the survivors answered %v", took.Round(100*time.Millisecond), answered)
	if took > takeoverBound {
		t.Fatalf("the killed replica's environments were owned again and READY after %s, more than %s", took, takeoverBound)
	}
	for _, v := range volumes {
		waitEvents(t, stream, v.id, want[v.id], time.Minute)
	}
	stillExactly(t, stream, want)

	// Scale 2 → 3 → 2, with a claim deleted while the third joins.
	before := after
	set.start("d")
	var churn tenantVolume
	for _, v := range volumes {
		if len(want[v.id]) == 2 {
			churn = v // still live
			break
		}
	}
	if err := churn.cluster.AdminClient().CoreV1().PersistentVolumeClaims(churn.namespace).Delete(t.Context(), churn.id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	after = set.settled(time.Minute)
	moved(t, before, after, 3)
	before = after
	set.kill(syscall.SIGTERM, "d")
	after = set.settled(time.Minute)
	moved(t, before, after, 3)
	want[churn.id] = waitDeleted(t, stream, churn.id)
	stillExactlyWithin(t, stream, want, time.Minute)

	fencedAfterFreeze(t, set, stream, volumes, want)
	samples, unowned := stopSampling()
	t.Logf("ownership sampled %d times through kills, scaling and a freeze", samples)
	if unowned != "" {
		t.Fatal(unowned)
	}

	// Every replica stopped at once and started again, as a rollout that
	// replaces every pod does: each one's hand-over on leaving may go to
	// another that is leaving too, and every environment must be owned
	// and connected again all the same.
	all := set.live()
	set.kill(syscall.SIGTERM, all...)
	set.startAll(all...)
	set.settled(time.Minute)
}

// registryChangeBound is how soon every replica follows a registry change
// made through another: the registry's watch reads it every 2 s.
const registryChangeBound = 3 * time.Second

// registryChangeSeenEverywhere changes the region of an environment c owns
// through a, and wants b (which neither made the change nor owns the
// environment) to show the environment's classes in the new region within
// registryChangeBound: its fleet index follows its own registry watch.
func registryChangeSeenEverywhere(t *testing.T, set *replicaSet, owners map[string]string) {
	t.Helper()
	env := ownedBy(owners, "c")[0]
	region := "moved-" + uuid.NewString()[:8]
	code, body := set.client("a").do(http.MethodPatch, "/api/v1alpha1/environments/"+env, map[string]any{"region": region})
	set.client("a").want(http.StatusOK, code, body)
	changed := time.Now()
	set.client("b").eventually(10*time.Second, "replica b shows "+env+" in region "+region, func() bool {
		_, got := set.client("b").do(http.MethodGet, "/api/v1alpha1/storage-classes?region="+region, nil)
		return strings.Contains(fmt.Sprint(got["storage_classes"]), env)
	})
	took := time.Since(changed)
	t.Logf("a registry change made through a was followed by b after %s", took.Round(10*time.Millisecond))
	if took > registryChangeBound {
		t.Fatalf("replica b followed a registry change made through a after %s, more than %s", took, registryChangeBound)
	}
}

// specChangeDecidesTheNextCreate: an environment's owner decides a create
// (or its refusal) under the environment's spec as it is then, even when
// the spec changed a moment before. The default class changes while c owns
// the environment and has created volumes in it: through a (forwarded to
// c, which updates it), then twice by a writer c has not heard of yet — as
// an earlier owner finishing an update during a hand-over would be, seen
// by c's registry watch only at its next read: to a class the cluster does
// not have (the create is refused), and back (the next one is not).
func specChangeDecidesTheNextCreate(t *testing.T, set *replicaSet, owners map[string]string) {
	t.Helper()
	env := ownedBy(owners, "c")[0]
	elsewhere := func(class string) func() {
		return func() {
			if _, err := set.db.Exec(t.Context(), `UPDATE environments SET generation = generation + 1,
				defaults = jsonb_set(defaults, '{storage_class}', to_jsonb($2::text)) WHERE id = $1`, env, class); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, step := range []struct {
		class  string
		change func()
		code   int
	}{
		{"standard-wffc", func() {
			code, body := set.client("a").do(http.MethodPatch, "/api/v1alpha1/environments/"+env,
				map[string]any{"defaults": map[string]any{"storage_class": "standard-wffc"}})
			set.client("a").want(http.StatusOK, code, body)
		}, http.StatusCreated},
		{"gold", elsewhere("gold"), http.StatusUnprocessableEntity},
		{"standard", elsewhere("standard"), http.StatusCreated},
	} {
		step.change()
		v := tenantVolumeIn(env)
		code, body := set.client("a").do(http.MethodPost, volumesPath(env)+"?id="+v.id, map[string]any{"spec": storageSpec("d", "1Gi", nil)})
		if step.code != http.StatusCreated {
			set.client("a").want(step.code, code, body, step.class)
			continue
		}
		set.client("a").want(http.StatusCreated, code, body)
		pvc, err := v.cluster.AdminClient().CoreV1().PersistentVolumeClaims(v.namespace).Get(t.Context(), v.id, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(pvc.Spec.StorageClassName, ""); got != step.class {
			t.Fatalf("a create right after the default class became %s made a claim of class %q", step.class, got)
		}
		code, body = set.client("a").do(http.MethodDelete, volumesPath(env)+"/"+v.id, nil)
		set.client("a").want(http.StatusNoContent, code, body)
	}
}

// allStopped reports whether every thread of process pid is stopped (state
// T in /proc/<pid>/task/*/stat).
func allStopped(pid int) bool {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// sampleOwnership reads environment_owners every 100 ms until the returned
// stop is called, which reports how many samples it took and, if any
// sample found an environment whose row named no owner, the first such.
// The primary key rules out two owner rows; hand-overs give an environment
// from one member straight to the next, and a dead or frozen owner stays
// named until another claims it, so every sample finds exactly one.
func sampleOwnership(t *testing.T, set *replicaSet) (stop func() (int, string)) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	type result struct {
		samples int
		unowned string
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var unowned []string
			rows, err := set.db.Query(ctx, `SELECT e.id FROM environments e LEFT JOIN environment_owners o ON o.environment_id = e.id
				WHERE o.member_id IS NULL`)
			if err == nil {
				unowned, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				if ctx.Err() == nil && r.unowned == "" {
					r.unowned = "sample: " + err.Error()
				}
				continue
			}
			r.samples++
			if len(unowned) > 0 && r.unowned == "" {
				r.unowned = fmt.Sprintf("at %s, %d environments had no owner (first %s)", time.Now().Format(time.StampMilli), len(unowned), unowned[0])
			}
		}
	}()
	return func() (int, string) {
		cancel()
		r := <-done
		return r.samples, r.unowned
	}
}

// tenantVolumeIn names a new volume in a tenant environment (registered as
// "<cluster>-<namespace>").
func tenantVolumeIn(env string) tenantVolume {
	for _, c := range clusters {
		if ns, ok := strings.CutPrefix(env, c.Name()+"-"); ok {
			return tenantVolume{env: env, namespace: ns, id: uuid.NewString(), cluster: c}
		}
	}
	panic("not a tenant environment: " + env)
}

// askDuringTakeover reads the volumes through every live replica until all
// answer 200; a 503 must carry Retry-After, anything else fails. It returns
// how many answers of each status it got.
func askDuringTakeover(t *testing.T, set *replicaSet, vols []tenantVolume) map[int]int {
	t.Helper()
	answered := map[int]int{}
	set.client(set.live()[0]).eventually(takeoverBound+30*time.Second, "every replica serves the killed replica's volumes", func() bool {
		ok := true
		for _, id := range set.live() {
			c := set.client(id)
			for _, v := range vols {
				resp := c.get(volumesPath(v.env) + "/" + v.id)
				_ = resp.Body.Close()
				answered[resp.StatusCode]++
				if ids := resp.Header.Values("X-Request-Id"); len(ids) != 1 {
					t.Fatalf("replica %s answered with request ids %v (forwarded answers carry one)", id, ids)
				}
				switch {
				case resp.StatusCode == http.StatusOK:
				case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
					ok = false
				default:
					t.Fatalf("replica %s answered %d (Retry-After %q) for %s during the takeover", id, resp.StatusCode, resp.Header.Get("Retry-After"), v.env)
				}
			}
		}
		return ok
	})
	return answered
}

// sameFleetViews checks every replica's fleet views are the same: the
// StorageClasses (each replica shows the others' environments from their
// snapshots) and the volumes (from the records, bound volumes named).
func sameFleetViews(t *testing.T, set *replicaSet) {
	t.Helper()
	for _, path := range []string{"/api/v1alpha1/storage-classes?max_page_size=1000", "/api/v1alpha1/volumes?max_page_size=1000"} {
		sameOnEveryReplica(t, set, path)
	}
}

// sameOnEveryReplica waits until every replica answers path the same.
func sameOnEveryReplica(t *testing.T, set *replicaSet, path string) {
	t.Helper()
	poll.Value(t, 30*time.Second, func() (string, bool) {
		var want string
		for _, id := range set.live() {
			var got map[string]any
			set.client(id).getJSON(path, &got)
			text := fmt.Sprint(got)
			if want == "" {
				want = text
			} else if text != want {
				at := 0
				for at < len(text) && at < len(want) && text[at] == want[at] {
					at++
				}
				return fmt.Sprintf("%s: %s's answer differs from %s's at %d: %.300s\nversus %.300s", path, id, set.live()[0], at,
					text[max(at-200, 0):], want[max(at-200, 0):]), false
			}
		}
		return "", true
	})
}

// waitDeleted waits until a volume whose claim was deleted out of band is
// reported DELETED and returns what it reported: PROVISIONING, RUNNING,
// then DELETING if its owner watched the claim being deleted, DELETED.
func waitDeleted(t *testing.T, stream *natstest.Stream, id string) []string {
	t.Helper()
	got := poll.Value(t, time.Minute, func() ([]string, bool) {
		got := natstest.For(stream.Events(), id)
		return got, len(got) > 0 && got[len(got)-1] == "DELETED"
	})
	if !slices.Equal(got, []string{"PROVISIONING", "RUNNING", "DELETED"}) && !slices.Equal(got, []string{"PROVISIONING", "RUNNING", "DELETING", "DELETED"}) {
		t.Fatalf("volume %s reported %v", id, got)
	}
	return got
}

// stillExactlyWithin waits until every volume reported exactly want, then
// checks nothing more arrives (stillExactly).
func stillExactlyWithin(t *testing.T, stream *natstest.Stream, want map[string][]string, within time.Duration) {
	t.Helper()
	for id, statuses := range want {
		waitEvents(t, stream, id, statuses, within)
	}
	stillExactly(t, stream, want)
}

// fencedAfterFreeze freezes a replica (SIGSTOP) past its lease, lets the
// other take its environments over, deletes a claim of one of them
// meanwhile, and resumes it: the new owner reports the deletion once, and no
// event row the frozen replica's epochs could write was queued after the
// takeover.
func fencedAfterFreeze(t *testing.T, set *replicaSet, stream *natstest.Stream, volumes []tenantVolume, want map[string][]string) {
	t.Helper()
	owners := set.owners()
	frozen := owners[volumes[len(volumes)-1].env]
	var victim *tenantVolume
	for i := range volumes {
		if v := volumes[i]; owners[v.env] == frozen && len(want[v.id]) == 2 {
			victim = &volumes[i]
			break
		}
	}
	if victim == nil {
		t.Fatalf("no live volume in an environment of %s", frozen)
	}
	p := set.procs[frozen]
	set.pause(frozen, true)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = p.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	// Meanwhile a request for the victim, sent to another replica, is
	// forwarded to the frozen owner: it is answered 503 (never 401) within
	// the forwarding deadline, not held until the caller gives up.
	var other string
	for _, id := range set.live() {
		if id != frozen {
			other = id
			break
		}
	}
	type answer struct {
		code int
		took time.Duration
		err  error
	}
	forwarded := make(chan answer, 1)
	go func() {
		start := time.Now()
		code, _, err := set.client(other).try(http.MethodGet, volumesPath(victim.env)+"/"+victim.id, nil)
		forwarded <- answer{code, time.Since(start), err}
	}()
	type claim struct {
		epoch int64
		at    time.Time
	}
	taken := map[string]claim{}
	set.client(set.live()[0]).eventually(takeoverBound+10*time.Second, "the frozen replica's environments claimed by the other", func() bool {
		rows, err := set.db.Query(t.Context(), `SELECT environment_id, epoch, claim_time FROM environment_owners WHERE member_id <> $1`, frozen)
		if err != nil {
			t.Fatal(err)
		}
		var env string
		var c claim
		if _, err := pgx.ForEachRow(rows, []any{&env, &c.epoch, &c.at}, func() error {
			if owners[env] == frozen {
				taken[env] = c
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return len(taken) == len(ownedBy(owners, frozen))
	})
	if a := <-forwarded; a.err != nil || a.code != http.StatusServiceUnavailable || a.took > forwarding.DefaultTimeout+5*time.Second {
		t.Fatalf("a request forwarded to the frozen owner: %d after %s (%v), want 503 within %s", a.code, a.took, a.err, forwarding.DefaultTimeout)
	}
	if err := victim.cluster.AdminClient().CoreV1().PersistentVolumeClaims(victim.namespace).Delete(context.WithoutCancel(t.Context()), victim.id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want[victim.id] = waitDeleted(t, stream, victim.id)
	resume()
	// The resumed replica sees the deletion too, and its lease is renewed:
	// give it time to try its late writes, then settle.
	stillExactlyAfter(t, stream, want, 5*time.Second)
	set.settled(time.Minute)
	stillExactly(t, stream, want)

	rows, err := set.db.Query(t.Context(), `SELECT environment_id, coalesce(epoch, 0), create_time FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	var env string
	var epoch int64
	var created time.Time
	late := 0
	if _, err := pgx.ForEachRow(rows, []any{&env, &epoch, &created}, func() error {
		if c, ok := taken[env]; ok && epoch < c.epoch && created.After(c.at) {
			late++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if late > 0 {
		t.Fatalf("%d events were queued at the frozen replica's epochs after the takeover", late)
	}
	t.Logf("the frozen replica (%s) lost %d environments; the fence refused %d late writes it logged", frozen, len(taken),
		strings.Count(p.Logs(), "another replica owns the environment now"))
}
