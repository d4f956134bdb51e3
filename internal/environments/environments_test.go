package environments_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// registration is a valid registration of the harness cluster.
//
// The tests register many environments on the one cluster's namespaces:
// each shares them (TestASecondEnvironmentOfANamespaceIsRefused shows the
// refusal without).
func registration(t testing.TB, id string) environments.Registration {
	t.Helper()
	kc, err := cluster.GatewayKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	env := cluster.Spec.Environment
	return environments.Registration{
		ID: id,
		Spec: environments.Spec{
			DisplayName:       env.DisplayName,
			Labels:            map[string]string{"site": "east", "tier": "dev"},
			Region:            env.Region,
			Zone:              env.Zone,
			AllowedNamespaces: env.AllowedNamespaces,
			DCM:               environments.DCMSettings{Register: true},
			ShareNamespaces:   true,
		},
		Credentials: environments.Credentials{Kubeconfig: kc},
	}
}

// A second environment of a cluster namespace is refused, naming the
// first, unless it shares on purpose; so is an update that stops sharing
// while another serves the namespace. The cluster is known by its
// kube-system namespace, whichever address reaches it.
func TestASecondEnvironmentOfANamespaceIsRefused(t *testing.T) {
	reg := registrytest.New(t, registrytest.Options{})
	ctx := context.Background()
	alone := func(id string) environments.Registration {
		in := registration(t, id)
		in.Spec.ShareNamespaces = false
		return in
	}
	first, _, err := reg.Registry.Register(ctx, alone("first"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.Status.ClusterID, "kube-system/") {
		t.Fatalf("cluster id %q, want the kube-system namespace's uid", first.Status.ClusterID)
	}
	_, _, err = reg.Registry.Register(ctx, alone("second"))
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.Conflict || !strings.Contains(fe.Detail, `environment "first"`) {
		t.Fatalf("a second registration of the namespace: %v, want a conflict naming first", err)
	}
	if _, _, err := reg.Registry.Register(ctx, registration(t, "second")); err != nil {
		t.Fatalf("a second registration sharing the namespace: %v", err)
	}
	_, err = reg.Registry.Update(ctx, "second", []byte(`{"share_namespaces": false}`))
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.Conflict || !strings.Contains(fe.Detail, `environment "first"`) {
		t.Fatalf("stopping sharing beside first: %v, want a conflict naming first", err)
	}
}

// tokenConnection is explicit credentials for the harness cluster.
func tokenConnection(token string) *kubeconfig.Connection {
	return &kubeconfig.Connection{Server: cluster.ServerURL(), CAData: cluster.CAData(), Token: token}
}

// wantKind asserts err's kind and detail and returns the classified error
// (by value, so callers may inspect it without having to "check" it).
func wantKind(t *testing.T, err error, kind fault.Kind, detail string) fault.Error {
	t.Helper()
	fe, ok := fault.As(err)
	if !ok || fe.Kind != kind {
		t.Fatalf("error = %v, want kind %d", err, kind)
	}
	if !strings.Contains(fe.Error(), detail) {
		t.Fatalf("error %q does not mention %q", fe.Error(), detail)
	}
	return *fe
}

func TestRegisterProbesStoresSealedAndReplays(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	in := registration(t, "east")

	env, created, err := reg.Registry.Register(ctx, in)
	if err != nil || !created {
		t.Fatalf("Register: created=%v err=%v", created, err)
	}
	if env.Status.State != environments.StateReady || env.Status.KubernetesVersion != "v1.36.3" {
		t.Fatalf("status = %+v, want READY on v1.36.3", env.Status)
	}
	if env.Status.StorageClassCount == nil || *env.Status.StorageClassCount < 5 || env.Status.LastReadyTime == nil {
		t.Fatalf("status = %+v, want storage classes counted and a ready time", env.Status)
	}
	if env.Spec.Namespace != "dcm-volumes" {
		t.Fatalf("namespace = %q, want the kubeconfig context's dcm-volumes", env.Spec.Namespace)
	}
	if env.Spec.DCM.ProviderName != "storage-gateway-east" {
		t.Fatalf("provider name = %q", env.Spec.DCM.ProviderName)
	}
	// What volume writes read of it is the spec Get returns.
	if spec, err := reg.Registry.Spec(ctx, "east"); err != nil || !reflect.DeepEqual(spec.Spec, env.Spec) {
		t.Fatalf("Spec = %+v, %v; want %+v", spec, err, env.Spec)
	}
	_, err = reg.Registry.Spec(ctx, "nowhere")
	wantKind(t, err, fault.NotFound, "nowhere")
	c := env.Connection
	if c.Server != cluster.ServerURL() || c.AuthType != kubeconfig.AuthToken || c.KeyID != "k1" || len(c.CASHA256) != 64 {
		t.Fatalf("connection = %+v", c)
	}

	again, created, err := reg.Registry.Register(ctx, in)
	if err != nil || created || again.ID != "east" || !again.CreateTime.Equal(env.CreateTime) {
		t.Fatalf("identical replay: created=%v err=%v", created, err)
	}
	// The registration answered with the row as stored, as a read of it
	// (the replay's) shows it.
	if !reflect.DeepEqual(again, env) {
		t.Fatalf("registration answered\n%+v\nthe row reads\n%+v", env, again)
	}

	changed := in
	changed.Spec.Region = "elsewhere"
	_, _, err = reg.Registry.Register(ctx, changed)
	wantKind(t, err, fault.AlreadyExists, "different specification")

	otherToken, err := cluster.NewGatewayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rotated := in
	rotated.Credentials = environments.Credentials{Explicit: tokenConnection(otherToken)}
	rotated.Spec.Namespace = "dcm-volumes"
	_, _, err = reg.Registry.Register(ctx, rotated)
	wantKind(t, err, fault.AlreadyExists, "credentials")

	reg.AssertNoSecret(t, cluster.GatewayToken(), fmt.Sprintf("%+v", env), err.Error())
	reg.AssertNoSecret(t, otherToken)
}

func TestRegisterRefusesWhatTheProbeRejects(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{Settings: map[string]string{"SG_PROBE_TIMEOUT": "2s"}})
	readClasses := []rbacv1.PolicyRule{{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}}}
	noPVCs, err := cluster.RestrictedToken(ctx, "no-pvcs", readClasses)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC grants a rule restricted to resource names for those objects
	// only: it does not let the gateway create or list claims.
	namedOnly, err := cluster.RestrictedToken(ctx, "named-pvcs-only", append(readClasses, rbacv1.PolicyRule{APIGroups: []string{""},
		Resources: []string{"persistentvolumeclaims", "events"}, ResourceNames: []string{"one-claim"}, Verbs: []string{"*"}}))
	if err != nil {
		t.Fatal(err)
	}
	otherCA := httptest.NewTLSServer(http.NotFoundHandler())
	defer otherCA.Close()
	wrongCA := otherCA.Certificate().Raw

	tests := []struct {
		name string
		conn *kubeconfig.Connection
		// settings, when set, replace the test registry's.
		settings map[string]string
		want     string
		cut      bool
	}{
		{name: "token without PVC rights", conn: tokenConnection(noPVCs),
			want: "(UNAUTHORIZED): the credentials lack required permissions: create persistentvolumeclaims in namespace dcm-volumes"},
		{name: "PVC rights for named claims only", conn: tokenConnection(namedOnly),
			want: "(UNAUTHORIZED): the credentials lack required permissions: create persistentvolumeclaims in namespace dcm-volumes"},
		{name: "unknown token", conn: tokenConnection("not-a-valid-token-canary-4711"),
			want: "(UNAUTHORIZED): the API server rejected the credentials (401 Unauthorized)"},
		{name: "wrong CA", conn: &kubeconfig.Connection{Server: cluster.ServerURL(), CAData: pemCert(wrongCA), Token: cluster.GatewayToken()},
			want: "(UNREACHABLE): TLS verification failed"},
		{name: "server name mismatch", conn: &kubeconfig.Connection{Server: cluster.ServerURL(), CAData: cluster.CAData(), TLSServerName: "not-the-api-server.example", Token: cluster.GatewayToken()},
			want: "(UNREACHABLE): TLS verification failed: the server certificate does not match the server name"},
		{name: "unreachable cluster", conn: tokenConnection(cluster.GatewayToken()), cut: true,
			want: "(UNREACHABLE): the API server did not answer within 2s"},
		{name: "loopback under the production policy", conn: tokenConnection(cluster.GatewayToken()), settings: map[string]string{"SG_ALLOWED_CLUSTER_CIDRS": "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"},
			want: "(UNREACHABLE): egress: connection to 127.0.0.1 refused: loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reg
			if tt.settings != nil {
				r = registrytest.New(t, registrytest.Options{Settings: tt.settings})
			}
			if tt.cut {
				cluster.SetReachable(false)
				defer cluster.SetReachable(true)
			}
			in := registration(t, "probe-fails")
			in.Credentials = environments.Credentials{Explicit: tt.conn}
			in.Spec.Namespace = "dcm-volumes"
			start := time.Now()
			_, _, err := r.Registry.Register(ctx, in)
			wantKind(t, err, fault.FailedPrecondition, tt.want)
			if elapsed := time.Since(start); elapsed > 4*time.Second {
				t.Fatalf("probe took %s; the timeout is 2s", elapsed)
			}
			_, err = r.Registry.Get(ctx, "probe-fails")
			wantKind(t, err, fault.NotFound, "not found")
			r.AssertNoSecret(t, tt.conn.Token, err.Error())
		})
	}
}

// Permissions are judged from the cluster's own rules, as RBAC evaluates
// them: wildcard verbs, groups and resources grant everything.
func TestRegisterAcceptsWildcardRules(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	all, err := cluster.RestrictedToken(ctx, "wildcards", []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}})
	if err != nil {
		t.Fatal(err)
	}
	in := registration(t, "wildcards")
	in.Credentials = environments.Credentials{Explicit: tokenConnection(all)}
	in.Spec.Namespace = cluster.Spec.Environment.Namespace
	env, _, err := reg.Registry.Register(ctx, in)
	if err != nil || env.Status.State != environments.StateReady {
		t.Fatalf("register with wildcard rules: %+v, %v", env.Status, err)
	}
}

func TestUpdateMergesPatchesAndRotatesCredentials(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	env, _, err := reg.Registry.Register(ctx, registration(t, "east"))
	if err != nil {
		t.Fatal(err)
	}

	// A spec-only patch changes what it names, resets nulls and keeps the
	// rest; what volume writes read of it (Spec) follows at once, at a new
	// generation, and the one it held before is no longer current.
	before, err := reg.Registry.Spec(ctx, "east")
	if err != nil {
		t.Fatal(err)
	}
	got, err := reg.Registry.Update(ctx, "east", []byte(`{"display_name":"East (renamed)","labels":{"tier":null,"team":"storage"},"defaults":{"storage_class":"standard"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.DisplayName != "East (renamed)" || !maps.Equal(got.Spec.Labels, map[string]string{"site": "east", "team": "storage"}) ||
		got.Spec.Defaults.StorageClass != "standard" || got.Spec.Region != env.Spec.Region {
		t.Fatalf("after patch: %+v", got.Spec)
	}
	after, err := reg.Registry.Spec(ctx, "east")
	if err != nil || !reflect.DeepEqual(after.Spec, got.Spec) || after.Generation <= before.Generation {
		t.Fatalf("Spec after the patch = %+v, %v; want %+v at a generation above %d", after, err, got.Spec, before.Generation)
	}
	for _, tt := range []struct {
		generation int64
		current    bool
	}{{before.Generation, false}, {after.Generation, true}} {
		if current, err := reg.Registry.AtGeneration(ctx, "east", tt.generation); err != nil || current != tt.current {
			t.Fatalf("AtGeneration(%d) = %v, %v; want %v", tt.generation, current, err, tt.current)
		}
	}
	if !got.Connection.CredentialsUpdateTime.Equal(env.Connection.CredentialsUpdateTime) {
		t.Fatal("a spec-only patch must not touch the credentials")
	}

	bad := []struct{ patch, field string }{
		{`{"id":"other"}`, "id"},
		{`{"status":{"state":"READY"}}`, "status"},
		{`{"namespace":null}`, "namespace"},
		{`{"nmespace":"typo"}`, "nmespace"},
		{`{"labels":"x"}`, "labels"},
		{`{"defaults":{"access_mode":"ReadWriteSometimes"}}`, "defaults.access_mode"},
		{`[1,2]`, "body"},
		{`{"credentials":{"server":"http://example.com","token":"t"}}`, "credentials.server"},
		{`{"kubeconfig_context":"east"}`, "kubeconfig_context"},
		{`{"kubeconfig":null}`, "kubeconfig"},
		{`{"credentials":null}`, "credentials"},
	}
	for _, b := range bad {
		_, err := reg.Registry.Update(ctx, "east", []byte(b.patch))
		if fe := wantKind(t, err, fault.InvalidArgument, ""); fe.Field != b.field {
			t.Errorf("patch %s: field %q, want %q", b.patch, fe.Field, b.field)
		}
	}

	// Rotation: a failing probe changes nothing; a good one replaces the credentials.
	_, err = reg.Registry.Update(ctx, "east", mustJSON(t, map[string]any{"credentials": map[string]any{
		"server": cluster.ServerURL(), "certificate_authority_data": cluster.CAData(), "token": "revoked-canary-token"}}))
	wantKind(t, err, fault.FailedPrecondition, "401")
	fresh, err := cluster.NewGatewayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := reg.Registry.Update(ctx, "east", mustJSON(t, map[string]any{"credentials": map[string]any{
		"server": cluster.ServerURL(), "certificate_authority_data": cluster.CAData(), "token": fresh}}))
	if err != nil {
		t.Fatal(err)
	}
	if !rotated.Connection.CredentialsUpdateTime.After(env.Connection.CredentialsUpdateTime) || rotated.Status.State != environments.StateReady {
		t.Fatalf("rotation did not take: %+v", rotated.Connection)
	}
	// Namespaces the credentials cannot serve are refused after a probe.
	_, err = reg.Registry.Update(ctx, "east", []byte(`{"allowed_namespaces":["kube-system"]}`))
	wantKind(t, err, fault.FailedPrecondition, "create persistentvolumeclaims in namespace kube-system")
	reg.AssertNoSecret(t, fresh)
	reg.AssertNoSecret(t, "revoked-canary-token")
}

func TestVerifyRecordsReachability(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{Settings: map[string]string{"SG_PROBE_TIMEOUT": "2s"}})
	if _, _, err := reg.Registry.Register(ctx, registration(t, "east")); err != nil {
		t.Fatal(err)
	}
	cluster.SetReachable(false)
	env, err := reg.Registry.Verify(ctx, "east")
	cluster.SetReachable(true)
	if err != nil {
		t.Fatal(err)
	}
	if env.Status.State != environments.StateUnreachable || env.Status.LastProbeTime == nil || !env.Status.LastProbeTime.After(*env.Status.LastReadyTime) {
		t.Fatalf("cut cluster: status %+v", env.Status)
	}
	list, err := reg.Registry.List(ctx, environments.ListQuery{State: environments.StateUnreachable})
	if err != nil || len(list.Environments) != 1 {
		t.Fatalf("list UNREACHABLE = %d, %v", len(list.Environments), err)
	}
	env, err = reg.Registry.Verify(ctx, "east")
	if err != nil || env.Status.State != environments.StateReady {
		t.Fatalf("after recovery: %+v, %v", env.Status, err)
	}
}

func TestDeleteRefusesWhileVolumesExistUnlessForced(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	if _, _, err := reg.Registry.Register(ctx, registration(t, "east")); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.DB.Exec(ctx, `INSERT INTO volumes (environment_id, id, namespace, spec) VALUES ('east', 'v1', 'dcm-volumes', '{}')`); err != nil {
		t.Fatal(err)
	}
	env, _ := reg.Registry.Get(ctx, "east")
	if env.Status.VolumeCount != 1 {
		t.Fatalf("volume_count = %d, want 1", env.Status.VolumeCount)
	}
	_, err := reg.Registry.Update(ctx, "east", []byte(`{"namespace":"dcm-scratch","allowed_namespaces":[]}`))
	wantKind(t, err, fault.Conflict, "namespaces dcm-volumes still hold 1 volume(s)")
	wantKind(t, reg.Registry.Delete(ctx, "east", false), fault.Conflict, "still has 1 volume")
	if err := reg.Registry.Delete(ctx, "east", true); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := reg.DB.QueryRow(ctx, `SELECT count(*) FROM volumes`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("volume records left: %d, %v", left, err)
	}
	wantKind(t, reg.Registry.Delete(ctx, "east", false), fault.NotFound, "not found")
}

func TestListPagesAndFilters(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	for i := range 5 {
		in := registration(t, fmt.Sprintf("env-%d", i))
		in.Spec.Region = []string{"north", "south"}[i%2]
		in.Spec.Labels = map[string]string{"parity": []string{"even", "odd"}[i%2], "n": fmt.Sprint(i)}
		if i == 2 {
			in.Spec.Labels["gold"] = "yes"
		}
		if _, _, err := reg.Registry.Register(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	q := environments.ListQuery{MaxPageSize: 2}
	for pages := 0; ; pages++ {
		page, err := reg.Registry.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Environments {
			ids = append(ids, e.ID)
		}
		if page.NextPageToken == "" {
			if pages != 2 {
				t.Fatalf("%d pages, want 3 of at most 2", pages+1)
			}
			break
		}
		q.PageToken = page.NextPageToken
	}
	if !slices.Equal(ids, []string{"env-0", "env-1", "env-2", "env-3", "env-4"}) {
		t.Fatalf("paged ids = %v", ids)
	}

	page, err := reg.Registry.List(ctx, environments.ListQuery{Region: "south", LabelSelector: "parity=odd"})
	if err != nil || len(page.Environments) != 2 || page.Environments[0].ID != "env-1" {
		t.Fatalf("filtered list = %+v, %v", page.Environments, err)
	}
	// Label selectors as kubectl writes them.
	for selector, want := range map[string]string{
		"parity==odd":             "env-1 env-3",
		"parity!=odd":             "env-0 env-2 env-4",
		"n in (1,3,4)":            "env-1 env-3 env-4",
		"n notin (0),parity=even": "env-2 env-4",
		"gold":                    "env-2",
		"!gold":                   "env-0 env-1 env-3 env-4",
		"gold,!parity":            "",
		"nope=x":                  "",
	} {
		page, err := reg.Registry.List(ctx, environments.ListQuery{LabelSelector: selector})
		var got []string
		for _, e := range page.Environments {
			got = append(got, e.ID)
		}
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("selector %q: %v %v, want %q", selector, got, err, want)
		}
	}
	for _, bad := range []string{"a b", "n>1", "=x", "Tier_!=x"} {
		_, err := reg.Registry.List(ctx, environments.ListQuery{LabelSelector: bad})
		wantKind(t, err, fault.InvalidArgument, "label_selector")
	}
	first, _ := reg.Registry.List(ctx, environments.ListQuery{MaxPageSize: 1})
	_, err = reg.Registry.List(ctx, environments.ListQuery{Region: "north", PageToken: first.NextPageToken})
	wantKind(t, err, fault.InvalidArgument, "page_token")
	_, err = reg.Registry.List(ctx, environments.ListQuery{PageToken: "garbage"})
	wantKind(t, err, fault.InvalidArgument, "page_token")
}

func TestRegistrationValidation(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	canary := "validation-canary-token-97531"
	tests := []struct {
		name  string
		edit  func(*environments.Registration)
		field string
	}{
		{"bad id", func(r *environments.Registration) { r.ID = "Not_Valid" }, "id"},
		{"no credentials", func(r *environments.Registration) { r.Credentials = environments.Credentials{} }, "kubeconfig"},
		{"both credential kinds", func(r *environments.Registration) { r.Credentials.Explicit = tokenConnection(canary) }, "kubeconfig"},
		{"exec kubeconfig", func(r *environments.Registration) {
			r.Credentials.Kubeconfig = []byte("apiVersion: v1\nusers:\n- name: u\n  user:\n    exec:\n      command: /bin/sh\n")
		}, "kubeconfig.users[0].user.exec"},
		{"http server", func(r *environments.Registration) {
			r.Credentials = environments.Credentials{Explicit: &kubeconfig.Connection{Server: "http://127.0.0.1:1", Token: canary}}
		}, "credentials.server"},
		{"bad namespace", func(r *environments.Registration) { r.Spec.Namespace = "Bad_NS" }, "namespace"},
		{"bad allowed namespace", func(r *environments.Registration) { r.Spec.AllowedNamespaces = []string{"ok", "-bad"} }, "allowed_namespaces"},
		{"bad label", func(r *environments.Registration) { r.Spec.Labels = map[string]string{"bad key": "v"} }, "labels"},
		{"bad volume mode", func(r *environments.Registration) { r.Spec.Defaults.VolumeMode = "Tape" }, "defaults.volume_mode"},
		{"bad provider name", func(r *environments.Registration) { r.Spec.DCM.ProviderName = "UPPER" }, "dcm.provider_name"},
		{"long display name", func(r *environments.Registration) { r.Spec.DisplayName = strings.Repeat("x", 300) }, "display_name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := registration(t, "valid-id")
			tt.edit(&in)
			_, _, err := reg.Registry.Register(ctx, in)
			fe := wantKind(t, err, fault.InvalidArgument, "")
			if fe.Field != tt.field {
				t.Fatalf("field = %q, want %q (%v)", fe.Field, tt.field, fe)
			}
			if strings.Contains(fe.Error(), canary) {
				t.Fatal("error echoes the token")
			}
		})
	}
	if rows := reg.DumpTable(t, "environments"); rows != "" {
		t.Fatalf("invalid registrations stored rows: %d bytes", len(rows))
	}
}

func TestKeyRotation(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	for _, id := range []string{"a", "b", "c"} {
		if _, _, err := reg.Registry.Register(ctx, registration(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Keys.Add("k2"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Keys.Promote("k2"); err != nil {
		t.Fatal(err)
	}
	n, unreadable, err := reg.Registry.Rewrap(ctx)
	if err != nil || n != 3 || len(unreadable) != 0 {
		t.Fatalf("Rewrap = %d, %v, %v; want 3", n, unreadable, err)
	}
	usage, err := reg.Registry.KeyUsage(ctx)
	if err != nil || usage["k2"] == nil || usage["k2"].Environments != 3 || len(usage["k2"].Unopened) != 0 || usage["k1"] != nil {
		t.Fatalf("usage after rewrap = %v, %v", usage, err)
	}
	// The re-sealed credentials still work.
	env, err := reg.Registry.Verify(ctx, "b")
	if err != nil || env.Status.State != environments.StateReady || env.Connection.KeyID != "k2" {
		t.Fatalf("verify after rewrap: %+v, %v", env, err)
	}
	if err := reg.Keys.Remove("k1"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Registry.CheckKeys(ctx); err != nil {
		t.Fatalf("CheckKeys with every used key present: %v", err)
	}
	if err := reg.Keys.Promote("k1"); err == nil {
		t.Fatal("promoting a removed key succeeded")
	}
	// A ring that lacks a used key must be refused at start.
	if err := reg.Keys.Add("k3"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Keys.Promote("k3"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Keys.Remove("k2"); err != nil {
		t.Fatal(err)
	}
	err = reg.Registry.CheckKeys(ctx)
	if err == nil || !strings.Contains(err.Error(), "k2 (3 environments)") {
		t.Fatalf("CheckKeys = %v, want k2 named as missing", err)
	}
}

// Concurrent identical registrations create one environment; all succeed.
func TestConcurrentRegistrationsConverge(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	in := registration(t, "race")
	created := make(chan bool, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, c, err := reg.Registry.Register(ctx, in)
			created <- c
			errs <- err
		}()
	}
	n := 0
	for range 4 {
		if <-created {
			n++
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 {
		t.Fatalf("%d registrations report created, want exactly 1", n)
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Whoever can write the database but lacks the key ring cannot send the
// token elsewhere: the gateway connects with the sealed copy of the server
// and refuses a row whose plain columns disagree with it.
func TestTamperedConnectionColumnsAreRefused(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	if _, _, err := reg.Registry.Register(ctx, registration(t, "east")); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	attacker := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer attacker.Close()
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET server = $1, certificate_authority = $2`,
		attacker.URL, pemCert(attacker.Certificate().Raw)); err != nil {
		t.Fatal(err)
	}
	env, err := reg.Registry.Verify(ctx, "east")
	if err != nil {
		t.Fatal(err)
	}
	if env.Status.State != environments.StateUnauthorized || !strings.Contains(env.Status.Message, "cannot be used") {
		t.Fatalf("status after tampering = %+v", env.Status)
	}
	if hits.Load() != 0 {
		t.Fatalf("the token was sent to the tampered server %d times", hits.Load())
	}
	if !strings.Contains(reg.Logs.String(), "stored connection settings differ from its sealed credentials") {
		t.Fatal("the refusal is not logged")
	}
}

// Turning SG_ALLOW_INSECURE_CLUSTERS off also stops environments registered
// while it was on.
func TestInsecureEnvironmentsStopWhenInsecureIsDisallowed(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{Settings: map[string]string{"SG_ALLOW_INSECURE_CLUSTERS": "true"}})
	in := registration(t, "lax")
	in.Spec.Namespace = "dcm-volumes"
	in.Credentials = environments.Credentials{Explicit: &kubeconfig.Connection{Server: cluster.ServerURL(), Insecure: true, Token: cluster.GatewayToken()}}
	env, _, err := reg.Registry.Register(ctx, in)
	if err != nil || !env.Connection.Insecure || env.Status.State != environments.StateReady {
		t.Fatalf("insecure registration while allowed: %+v, %v", env, err)
	}
	strict := reg.NewRegistry(t, registrytest.Options{})
	env, err = strict.Verify(ctx, "lax")
	if err != nil || env.Status.State != environments.StateUnreachable || !strings.Contains(env.Status.Message, "SG_ALLOW_INSECURE_CLUSTERS") {
		t.Fatalf("insecure environment under a strict gateway: %+v, %v", env.Status, err)
	}
}

// A fenced write under way (the owner row locked FOR SHARE, the environment
// row still to write) and a deletion of its environment must not form a
// lock cycle: the deletion waits for the write, then deletes.
func TestDeleteWaitsForAFencedWriteUnderWay(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	if _, _, err := reg.Registry.Register(ctx, registration(t, "east")); err != nil {
		t.Fatal(err)
	}
	incarnation := uuid.New()
	if _, err := reg.DB.Exec(ctx, `INSERT INTO environment_owners (environment_id, member_id, incarnation, epoch) VALUES ('east', 'a', $1, 1)`, incarnation); err != nil {
		t.Fatal(err)
	}
	write, err := reg.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = write.Rollback(ctx) }()
	var fenced bool
	if err := write.QueryRow(ctx, `SELECT `+membership.FenceSQL("'east'", "1", "$1"), incarnation).Scan(&fenced); err != nil || !fenced {
		t.Fatalf("fence: %v, %v", fenced, err)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- reg.Registry.Delete(ctx, "east", false) }()
	pgtest.AwaitActivity(t, reg.DB, "the deletion waiting for a lock", "wait_event_type = 'Lock'")
	if _, err := write.Exec(ctx, `UPDATE environments SET status_message = 'written under the fence' WHERE id = 'east'`); err != nil {
		t.Fatalf("the fenced write: %v", err)
	}
	if err := write.Commit(ctx); err != nil {
		t.Fatalf("commit the fenced write: %v", err)
	}
	if err := <-deleted; err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantKind(t, reg.Registry.Delete(ctx, "east", false), fault.NotFound, "not found")
}
