// Package helm_test proves the storage-gateway chart: it renders with the
// Helm Go SDK as `helm install` would, every rendered object passes a
// server-side dry-run on a real API server (with the CRDs of the optional
// objects installed there), it configures only settings the binary knows,
// its probes find the binary's health endpoints, and its schema refuses bad
// values.
package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/kubeobjects"
	"github.com/dcm-project/storage-gateway/test/docs"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// cluster is the harness API server the rendered objects are dry-run on.
var cluster *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunWithLocalClusters(m, 1, func(c []*harness.Cluster) { cluster = c[0] }))
}

const namespace = "storage-gateway"

var chartDir = filepath.Join(repo.Root(), "deploy", "helm", "storage-gateway")

// renderFiles renders the chart with values over its defaults, for a
// cluster with the given capabilities, as `helm install sg` into namespace
// would (the schema is enforced): every template's output by file name.
func renderFiles(t *testing.T, caps *common.Capabilities, values map[string]any) (map[string]string, error) {
	t.Helper()
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := util.ToRenderValuesWithSchemaValidation(chart, values,
		common.ReleaseOptions{Name: "sg", Namespace: namespace, IsInstall: true}, caps, false)
	if err != nil {
		return nil, err
	}
	return engine.Render(chart, vals)
}

// render returns every object renderFiles renders, hooks included.
func render(t *testing.T, caps *common.Capabilities, values map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	files, err := renderFiles(t, caps, values)
	if err != nil {
		return nil, err
	}
	var objects []*unstructured.Unstructured
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, helpers
		}
		objs, err := kubeobjects.Decode([]byte(files[name]))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, files[name])
		}
		objects = append(objects, objs...)
	}
	return objects, nil
}

// capabilities asks the cluster what Helm asks it: its version and APIs.
func capabilities(t *testing.T) *common.Capabilities {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	version, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := common.ParseKubeVersion(version.GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	apis, err := action.GetVersionSet(dc)
	if err != nil {
		t.Fatal(err)
	}
	return &common.Capabilities{KubeVersion: *kube, APIVersions: apis}
}

// dryRun creates every object with dryRun=All: the API server decodes,
// defaults, validates (schemas of built-in kinds and CRDs alike) and runs
// admission, and stores nothing.
func dryRun(t *testing.T, objects []*unstructured.Unstructured) {
	t.Helper()
	client, err := kubeobjects.NewClient(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cluster.AdminClient().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, obj := range objects {
		gvk := obj.GroupVersionKind()
		res, err := client.Resource(obj, namespace)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, obj.GetName(), err)
		}
		_, err = res.Create(ctx, obj,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
		if err != nil {
			t.Errorf("dry-run %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
}

// installCRDs installs the CustomResourceDefinitions of the chart's
// optional objects, from the modules test/tools/crds pins, and waits until
// discovery serves them.
func installCRDs(t *testing.T) {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json",
		"github.com/prometheus-operator/prometheus-operator", "github.com/openshift/api")
	cmd.Dir = filepath.Join(repo.Root(), "test", "tools", "crds")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download in test/tools/crds: %v", err)
	}
	dirs := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var m struct{ Path, Dir string }
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		dirs[m.Path] = m.Dir
	}
	files := []string{
		filepath.Join(dirs["github.com/prometheus-operator/prometheus-operator"], "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(dirs["github.com/prometheus-operator/prometheus-operator"], "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"),
		filepath.Join(dirs["github.com/openshift/api"], "route/v1/zz_generated.crd-manifests/routes.crd.yaml"),
	}
	client, err := dynamic.NewForConfig(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := sigsyaml.Unmarshal(data, &obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		_, err = client.Resource(crds).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("install %s: %v", filepath.Base(f), err)
		}
	}
	poll.Until(t, time.Minute, "the CRDs served", func() bool {
		caps := capabilities(t)
		return caps.APIVersions.Has("monitoring.coreos.com/v1/ServiceMonitor") && caps.APIVersions.Has("monitoring.coreos.com/v1/PrometheusRule") &&
			caps.APIVersions.Has("route.openshift.io/v1/Route")
	})
}

// kinds lists the rendered objects as Kind/name.
func kinds(objects []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// typed converts the one rendered object of a kind into its Go type.
func typed[T any](t *testing.T, objects []*unstructured.Unstructured, kind string) *T {
	t.Helper()
	for _, o := range objects {
		if o.GetKind() == kind {
			var out T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &out); err != nil {
				t.Fatal(err)
			}
			return &out
		}
	}
	t.Fatalf("no %s rendered; have %v", kind, kinds(objects))
	return nil
}

func loadValues(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := sigsyaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The chart with its default values and with every feature on renders what
// it should and the API server accepts every object; the optional objects of
// third-party APIs appear only once those APIs exist.
func TestChartRendersAndDryRuns(t *testing.T) {
	full := loadValues(t, "testdata/full-values.yaml")

	// Before the CRDs exist: the defaults, and the full values without
	// their ServiceMonitor and Route.
	plain := capabilities(t)
	defaults, err := render(t, plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Deployment/sg-storage-gateway", "Job/sg-storage-gateway-migrate", "PodDisruptionBudget/sg-storage-gateway",
		"Service/sg-storage-gateway", "ServiceAccount/sg-storage-gateway"}
	if got := kinds(defaults); !slices.Equal(got, want) {
		t.Fatalf("default values render %v, want %v", got, want)
	}
	checkPod(t, typed[appsv1.Deployment](t, defaults, "Deployment"), 2)
	dryRun(t, defaults)

	withoutCRDs, err := render(t, plain, full)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(withoutCRDs); slices.Contains(got, "ServiceMonitor/sg-storage-gateway") || slices.Contains(got, "Route/sg-storage-gateway") ||
		slices.Contains(got, "PrometheusRule/sg-storage-gateway") {
		t.Fatalf("objects of APIs the cluster lacks rendered: %v", got)
	}

	installCRDs(t)
	everything, err := render(t, capabilities(t), full)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"ConfigMap/sg-storage-gateway-dashboard", "Deployment/sg-storage-gateway", "Ingress/sg-storage-gateway",
		"Job/sg-storage-gateway-migrate", "NetworkPolicy/sg-storage-gateway", "PodDisruptionBudget/sg-storage-gateway",
		"PrometheusRule/sg-storage-gateway", "Route/sg-storage-gateway", "Service/sg-storage-gateway",
		"ServiceAccount/sg-storage-gateway", "ServiceMonitor/sg-storage-gateway"}
	if got := kinds(everything); !slices.Equal(got, want) {
		t.Fatalf("full values render %v, want %v", got, want)
	}
	checkPod(t, typed[appsv1.Deployment](t, everything, "Deployment"), 3)
	checkMonitoring(t, everything)
	dryRun(t, everything)

	// Every SG_* setting the chart makes, in either rendering, is one the
	// binary reads; any other variable comes from the downward API and is
	// only there to be expanded into one of them.
	for _, objects := range [][]*unstructured.Unstructured{defaults, everything} {
		for _, c := range containers(t, objects) {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "SG_") && !slices.Contains(config.Variables(), e.Name) {
					t.Errorf("container %s sets %s, which internal/config does not read", c.Name, e.Name)
				}
				if !strings.HasPrefix(e.Name, "SG_") && (e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || !referenced(c.Env, e.Name)) {
					t.Errorf("container %s sets %s, neither a setting nor a downward-API value a setting uses", c.Name, e.Name)
				}
			}
		}
	}
}

// checkMonitoring: the chart's alerting rules and dashboard are those of
// deploy/ (its copies are current, and rendered unchanged), and the
// dashboard is labelled for Grafana's sidecar.
func checkMonitoring(t *testing.T, objects []*unstructured.Unstructured) {
	t.Helper()
	copies := map[string]string{"../grafana/storage-gateway.json": "storage-gateway/files/storage-gateway.json",
		"../prometheus/alerts.yaml": "storage-gateway/files/alerts.yaml"}
	for canonical, copied := range copies {
		a, errA := os.ReadFile(canonical)
		b, errB := os.ReadFile(copied)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s (%v, %v): run make generate", copied, canonical, errA, errB)
		}
	}
	var rule, dashboard *unstructured.Unstructured
	for _, o := range objects {
		switch o.GetKind() {
		case "PrometheusRule":
			rule = o
		case "ConfigMap":
			dashboard = o
		}
	}
	if rule == nil || dashboard == nil {
		t.Fatal("no PrometheusRule or dashboard ConfigMap rendered")
	}
	var alerts map[string]any
	raw, err := os.ReadFile("../prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(raw, &alerts); err != nil {
		t.Fatal(err)
	}
	if spec, _, _ := unstructured.NestedFieldNoCopy(rule.Object, "spec"); !reflect.DeepEqual(spec, alerts) {
		t.Errorf("the PrometheusRule's spec is not deploy/prometheus/alerts.yaml:\n%v", spec)
	}
	if rule.GetLabels()["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v, want the values' release label", rule.GetLabels())
	}
	raw, err = os.ReadFile("../grafana/storage-gateway.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(dashboard.Object, "data", "storage-gateway.json"); got != strings.TrimSuffix(string(raw), "\n") {
		t.Errorf("the dashboard ConfigMap does not hold deploy/grafana/storage-gateway.json")
	}
	if dashboard.GetLabels()["grafana_dashboard"] != "1" || dashboard.GetAnnotations()["grafana_folder"] != "Storage" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v", dashboard.GetLabels(), dashboard.GetAnnotations())
	}
}

// checkPod holds the gateway's pod to the restricted Pod Security Standard
// and to how it must run: probes on the health endpoints, migrations left to
// the hook Job, no API access to its own cluster.
func checkPod(t *testing.T, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	if *d.Spec.Replicas != replicas {
		t.Errorf("replicas %d, want %d", *d.Spec.Replicas, replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.SeccompProfile == nil ||
		pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want non-root, seccomp RuntimeDefault", pod.SecurityContext)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a ServiceAccount token it never uses")
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v: want no privilege escalation, read-only root, all capabilities dropped", sc)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes %s / %s, want /healthz and /readyz", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["SG_MIGRATE_ON_START"] != "false" {
		t.Errorf("SG_MIGRATE_ON_START=%q with the migration hook on", env["SG_MIGRATE_ON_START"])
	}
	// The probes name the port; it is the one the binary listens on.
	if len(c.Ports) != 1 || c.Ports[0].Name != c.LivenessProbe.HTTPGet.Port.StrVal || c.Ports[0].Name != c.ReadinessProbe.HTTPGet.Port.StrVal ||
		env["SG_LISTEN_ADDR"] != fmt.Sprintf(":%d", c.Ports[0].ContainerPort) {
		t.Errorf("ports %+v, probes on %v, SG_LISTEN_ADDR %q: the probes must reach the port the gateway listens on",
			c.Ports, c.LivenessProbe.HTTPGet.Port, env["SG_LISTEN_ADDR"])
	}
}

// referenced reports whether an SG_* setting of env expands $(name).
func referenced(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e.Name, "SG_") && strings.Contains(e.Value, "$("+name+")") {
			return true
		}
	}
	return false
}

// containers are the containers of every rendered pod template.
func containers(t *testing.T, objects []*unstructured.Unstructured) []corev1.Container {
	t.Helper()
	var out []corev1.Container
	for _, o := range objects {
		tmpl, found, err := unstructured.NestedMap(o.Object, "spec", "template")
		if err != nil || !found {
			continue
		}
		var pt corev1.PodTemplateSpec
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pt); err != nil {
			t.Fatal(err)
		}
		out = append(out, pt.Spec.Containers...)
	}
	return out
}

// The binary, started with the settings the chart gives it (secrets and
// addresses replaced by the test's), answers the chart's liveness and
// readiness probes on their paths.
func TestChartProbesReachTheBinary(t *testing.T) {
	objects, err := render(t, capabilities(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := typed[appsv1.Deployment](t, objects, "Deployment").Spec.Template.Spec.Containers[0]
	replaced := map[string]bool{"SG_LISTEN_ADDR": true, "SG_NATS_URL": true, "SG_KEY_RING_FILE": true, "SG_AUTH_TOKEN_FILE": true,
		"SG_STATE_DIR": true, "SG_MIGRATE_ON_START": true}
	// The downward API's values, as the kubelet would expand them.
	pod := strings.NewReplacer("$(POD_IP)", "127.0.0.1")
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom == nil && !replaced[e.Name] {
			env = append(env, e.Name+"="+pod.Replace(e.Value))
		}
	}
	binary := gatewayproc.Binary(t)
	g := gatewayproc.Start(t, binary, gatewayproc.Env(t, binary, append(env,
		"SG_DATABASE_URL="+pgtest.NewDatabase(t).URL, "SG_NATS_URL="+natstest.Start(t).URL)...))
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		g.WaitOK(t, probe.HTTPGet.Path, "")
	}
}

// Values the schema forbids fail before anything renders, naming what is
// wrong.
func TestChartSchemaRefusesBadValues(t *testing.T) {
	caps := capabilities(t)
	for name, tc := range map[string]struct {
		values  map[string]any
		mention string
	}{
		"no replicas":         {map[string]any{"replicaCount": 0}, "replicaCount"},
		"unknown auth mode":   {map[string]any{"auth": map[string]any{"mode": "ldap"}}, "mode"},
		"a misspelt setting":  {map[string]any{"replicas": 2}, "replicas"},
		"oidc without issuer": {map[string]any{"auth": map[string]any{"mode": "oidc"}}, "issuerURL"},
		"root filesystem rw":  {map[string]any{"securityContext": map[string]any{"readOnlyRootFilesystem": false}}, "readOnlyRootFilesystem"},
		"not an SG_ setting":  {map[string]any{"extraEnv": []any{map[string]any{"name": "PATH", "value": "/"}}}, "name"},
		"a misspelt SG_ setting": {map[string]any{"extraEnv": []any{map[string]any{"name": "SG_PROBE_INTERVALL", "value": "1m"}}},
			"/extraEnv/0/name"},
		"a setting the chart sets": {map[string]any{"extraEnv": []any{map[string]any{"name": "SG_DATABASE_URL", "value": "postgres://x"}}},
			"/extraEnv/0/name"},
		"a setting the chart sets for a value": {map[string]any{"extraEnv": []any{map[string]any{"name": "SG_OIDC_ROLE_CLAIMS", "value": "roles"}}},
			"/extraEnv/0/name"},
		"DCM registration without a public URL": {map[string]any{"dcm": map[string]any{"registrationURL": "https://dcm.example.com/api/v1alpha1"}}, "publicURL"},
		"an Ingress without a host":             {map[string]any{"ingress": map[string]any{"enabled": true}}, "hosts"},
		"an Ingress with no hosts":              {map[string]any{"ingress": map[string]any{"enabled": true, "hosts": []any{}}}, "hosts"},
		"a CIDR that is not":                    {map[string]any{"allowedClusterCIDRs": []any{"10.0.0.0"}}, "allowedClusterCIDRs"},
		"no database secret":                    {map[string]any{"database": map[string]any{"existingSecret": ""}}, "existingSecret"},
		"a NATS URL with space":                 {map[string]any{"nats": map[string]any{"url": "nats://a b"}}, "url"},
		"a dashboard namespace that is not": {map[string]any{"metrics": map[string]any{"grafanaDashboard": map[string]any{
			"enabled": true, "namespace": "Monitoring!"}}}, "namespace"},
		"a rule label that is not a string": {map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{
			"labels": map[string]any{"release": 1}}}}, "release"},
	} {
		_, err := render(t, caps, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: got %v, want a schema error naming %s", name, err, tc.mention)
		}
	}
}

// extraEnv takes exactly the settings the binary reads that the chart does
// not set itself: the schema's list (make generate writes it) is
// config.Variables less every setting the chart renders, with every
// optional part on, and one of them passes.
func TestChartSchemaKnowsEverySetting(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			ExtraEnv struct {
				Items struct {
					Properties struct {
						Name struct {
							Enum []string `json:"enum"`
						} `json:"name"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"extraEnv"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	rendered := map[string]bool{}
	dcm := map[string]any{"registrationURL": "https://dcm.example.com/api/v1alpha1", "registrationInterval": "1m",
		"token":             map[string]any{"existingSecret": "dcm-token", "key": "token"},
		"clientCredentials": map[string]any{"clientID": "sg", "tokenURL": "https://sso.example.com/token", "existingSecret": "dcm-client", "key": "secret"}}
	for _, auth := range []map[string]any{
		{"mode": "oidc", "oidc": map[string]any{"issuerURL": "https://sso.example.com/realms/dcm", "roleClaims": "roles",
			"rolePrefix": "sg-", "environmentsClaim": "envs", "signingAlgs": "RS256"}},
		{"mode": "static", "dcmTrustedNetworks": []any{"10.0.0.0/8"}},
	} {
		objs, err := render(t, capabilities(t), map[string]any{"auth": auth, "dcm": dcm, "publicURL": "https://sg.example.com",
			"allowedHosts": []any{"sg.example.com"}, "allowedClusterCIDRs": []any{"10.0.0.0/8"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
				for _, e := range env {
					rendered[e.(map[string]any)["name"].(string)] = true
				}
			}
		}
	}
	got := schema.Properties.ExtraEnv.Items.Properties.Name.Enum
	want := slices.Sorted(slices.Values(slices.DeleteFunc(config.Variables(), func(n string) bool { return rendered[n] })))
	if !slices.Equal(got, want) {
		t.Fatalf("the schema's extraEnv names are stale (run make generate):\nschema: %v\nwant:   %v", got, want)
	}
	if _, err := render(t, capabilities(t), map[string]any{"extraEnv": []any{map[string]any{"name": "SG_PROBE_INTERVAL", "value": "1m"}}}); err != nil {
		t.Fatalf("a known setting in extraEnv: %v", err)
	}
}

// An optional object that is enabled but whose API the cluster does not
// serve is left out, and the install notes say so; once the API is served,
// the object renders and the notes are quiet.
func TestChartNotesWarnAboutObjectsLeftOut(t *testing.T) {
	enabled := map[string]any{
		"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}},
		"route":   map[string]any{"enabled": true, "host": "sg.example.com"},
	}
	without := common.DefaultCapabilities.Copy()
	files, err := renderFiles(t, without, enabled)
	if err != nil {
		t.Fatal(err)
	}
	notes := files["storage-gateway/templates/NOTES.txt"]
	for _, want := range []string{"metrics.serviceMonitor.enabled", "metrics.prometheusRule.enabled", "route.enabled"} {
		if !strings.Contains(notes, "WARNING: "+want+" is true") {
			t.Errorf("the notes do not warn that %s was left out:\n%s", want, notes)
		}
	}
	with := common.DefaultCapabilities.Copy()
	with.APIVersions = append(with.APIVersions, "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule",
		"route.openshift.io/v1/Route")
	if files, err = renderFiles(t, with, enabled); err != nil {
		t.Fatal(err)
	}
	if notes := files["storage-gateway/templates/NOTES.txt"]; strings.Contains(notes, "WARNING") {
		t.Errorf("the notes warn although every API is served:\n%s", notes)
	}
	if defaults, _ := renderFiles(t, without, nil); strings.Contains(defaults["storage-gateway/templates/NOTES.txt"], "WARNING") {
		t.Error("the notes warn with the default values")
	}
}

// The manual's install and template blocks work as written with the Helm 3
// and the Helm 4 CLI (and kubectl) against a real API server: the release
// is deployed, its migration hook Job having run — completed by a stand-in
// for the kubelet and the Job controller, which the harness has not — and
// the rendered objects are written. Each run starts from no namespace.
func TestInstallWithHelmAsWritten(t *testing.T) {
	ctx := t.Context()
	kubectl, err := harness.Tool(ctx, "kubectl", "github.com/dcm-project/storage-gateway/test/tools/kubectl")
	if err != nil {
		t.Fatal(err)
	}
	binary := gatewayproc.Binary(t)
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(kubeconfig, cluster.AdminKubeconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	install, template := docs.Blocks(t, "deploy/README.md", "helm-install"), docs.Blocks(t, "deploy/README.md", "helm-template")
	for _, helm := range []struct{ name, module, pkg string }{
		{"Helm 3", "helm3", "helm.sh/helm/v3/cmd/helm"},
		{"Helm 4", "helm4", "helm.sh/helm/v4/cmd/helm"},
	} {
		t.Run(helm.name, func(t *testing.T) {
			bin, err := harness.Tool(ctx, helm.module, helm.pkg)
			if err != nil {
				t.Fatal(err)
			}
			const ns, release = "storage-gateway", "storage-gateway"
			cluster.RemoveNamespace(t, ns)
			dir := t.TempDir()
			if err := os.Symlink(filepath.Join(repo.Root(), "deploy"), filepath.Join(dir, "deploy")); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(),
				"PATH="+strings.Join([]string{filepath.Dir(bin), filepath.Dir(kubectl), filepath.Dir(binary), os.Getenv("PATH")}, ":"))
			stop := completeMigrationJobs(t, ns)
			for _, block := range append(slices.Clone(install), template...) {
				out, err := docs.Run(ctx, dir, env, block)
				if err != nil {
					t.Fatalf("%s: the block failed: %v", helm.name, err)
				}
				t.Logf("%s:\n%s", helm.name, out)
			}
			if migrated := stop(); migrated != 1 {
				t.Errorf("the migration Job ran %d times, want once", migrated)
			}
			d, err := cluster.AdminClient().AppsV1().Deployments(ns).Get(ctx, release, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s installed no Deployment: %v", helm.name, err)
			}
			if image := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(image, ":0.1.0") {
				t.Errorf("the Deployment runs %s", image)
			}
			rendered, err := os.ReadFile(filepath.Join(dir, "storage-gateway.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := kubeobjects.Decode(rendered)
			if err != nil {
				t.Fatal(err)
			}
			if got := kinds(objs); !slices.Contains(got, "Deployment/"+release) || !slices.Contains(got, "Job/"+release+"-migrate") {
				t.Errorf("helm template rendered %v", got)
			}
			cluster.RemoveNamespace(t, ns)
		})
	}
}

// completeMigrationJobs stands in for the kubelet and the Job controller in
// ns: each Job that runs `storage-gateway migrate` is marked complete as
// they would once its pod exited 0. stop ends it and says how many it
// completed.
func completeMigrationJobs(t *testing.T, ns string) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	jobs := cluster.AdminClient().BatchV1().Jobs(ns)
	done := make(chan int, 1)
	go func() {
		completed := map[string]bool{}
		defer func() { done <- len(completed) }()
		for ctx.Err() == nil {
			list, err := jobs.List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					j := &list.Items[i]
					if completed[string(j.UID)] || !slices.Equal(j.Spec.Template.Spec.Containers[0].Args, []string{"migrate"}) {
						continue
					}
					now := metav1.Now()
					j.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
						{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
						{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
					}}
					if _, err := jobs.UpdateStatus(ctx, j, metav1.UpdateOptions{}); err == nil {
						completed[string(j.UID)] = true
					} else if ctx.Err() == nil {
						t.Logf("complete job %s: %v", j.Name, err)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() int { cancel(); return <-done }
}
