package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// TestEnvCommands drives the admin CLI against a real gateway and a real
// cluster: add from a manifest, list, get, rotate, verify, a refused hostile
// kubeconfig, and rm.
func TestEnvCommands(t *testing.T) {
	specs, err := harness.LocalSpecs()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster, err := harness.Start(ctx, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Stop)

	g := startGateway(t, map[string]string{
		"SG_DATABASE_URL":          pgtest.NewDatabase(t).URL,
		"SG_ALLOWED_CLUSTER_CIDRS": "127.0.0.0/8",
	})
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "gateway.kubeconfig")
	kc, err := cluster.GatewayKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, kubeconfig, kc)
	cli := []string{"SG_GATEWAY_URL=http://" + g.Addr, "SG_GATEWAY_TOKEN=" + g.Token()}
	manifest := filepath.Join(repo.Root(), "environments", "local-east.yaml")

	// A claim DCM's per-cluster storage provider made before the gateway came.
	peerMade := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "peer-made", Namespace: "dcm-volumes", Labels: map[string]string{
			"dcm.project/managed-by": "dcm", "dcm.project/dcm-instance-id": "peer-made", "dcm.project/dcm-service-type": "storage",
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := cluster.AdminClient().CoreV1().PersistentVolumeClaims("dcm-volumes").Create(ctx, peerMade, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, cli, "env", "add", "-f", manifest, "--kubeconfig", kubeconfig)
	if !strings.Contains(out, "local-east") || !strings.Contains(out, "READY") || !strings.Contains(out, "dcm-volumes") ||
		!strings.Contains(out, "dcm-scratch") {
		t.Fatalf("env add:\n%s", out)
	}

	list := listItems[struct {
		ID     string            `json:"id"`
		Labels map[string]string `json:"labels"`
		Status struct{ State string }
	}](t, mustRun(t, cli, "env", "list", "-o", "json", "-l", "site=east"))
	if len(list) != 1 || list[0].ID != "local-east" || list[0].Labels["tier"] != "dev" || list[0].Status.State != "READY" {
		t.Fatalf("env list: %+v", list)
	}

	// The fleet matrix: one row per class, one column per environment.
	poll.Until(t, 30*time.Second, "classes listing shared-files", func() bool {
		out = mustRun(t, cli, "classes")
		return strings.Contains(out, "shared-files")
	})
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, rest, ok := strings.Cut(line, " "); ok {
			rows[name] = strings.TrimSpace(rest)
		}
	}
	if rows["CLASS"] != "local-east" || rows["standard"] != "RWO,RWOP exp default 3Ti" || rows["archive"] != "?" ||
		rows["block"] != "? exp 800Gi" {
		t.Fatalf("classes:\n%s", out)
	}
	rwx := listItems[struct{ Name string }](t, mustRun(t, cli, "classes", "--access-mode", "ReadWriteMany", "-o", "json"))
	if len(rwx) != 1 || rwx[0].Name != "shared-files" {
		t.Fatalf("classes --access-mode ReadWriteMany: %+v", rwx)
	}
	// The short access-mode names the tables print are accepted as input.
	if out := mustRun(t, cli, "classes", "--access-mode", "rwx", "-o", "name"); out != "storageclass/shared-files\n" {
		t.Fatalf("classes --access-mode rwx -o name: %q", out)
	}
	// Snapshots and tiers: the CSI plugin's class.
	if out := mustRun(t, cli, "classes", "--snapshots", "--tier", "gold", "-o", "name"); out != "storageclass/snapshots\n" {
		t.Fatalf("classes --snapshots --tier gold -o name: %q", out)
	}
	if out := mustRun(t, cli, "place", "--capacity", "1Gi", "--snapshots", "-o", "json"); !strings.Contains(out, `"storage_class": "snapshots"`) || strings.Contains(out, `"storage_class": "standard"`) {
		t.Fatalf("place --snapshots: %s", out)
	}
	// --expandable is a switch, as on place: a word after it is no value.
	if out, err := run(t, cli, "classes", "--expandable", "maybe"); err == nil || !strings.Contains(out, `storage-gateway classes takes no argument "maybe"`) {
		t.Fatalf("classes --expandable maybe: %v\n%s", err, out)
	}

	// Where a ReadWriteMany volume can go: the class known to support it
	// first, classes of unknown modes after it; why the others cannot.
	out = mustRun(t, cli, "place", "--capacity", "1Gi", "--access-mode", "rwx", "-o", "name")
	if first, _, _ := strings.Cut(out, "\n"); first != "placement/local-east/shared-files" || strings.Contains(out, "/standard\n") {
		t.Fatalf("place --access-mode rwx -o name:\n%s", out)
	}
	out = mustRun(t, cli, "place", "--capacity", "1Gi", "--access-mode", "RWX", "--explain")
	if !regexp.MustCompile(`(?m)^1\s+local-east\s+shared-files\s+local\s+east-a\s+RWO,ROX,RWX\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  local-east\s+standard\s+supports ReadWriteOnce, ReadWriteOncePod, not ReadWriteMany$`).MatchString(out) {
		t.Fatalf("place --explain:\n%s", out)
	}
	if out, err := run(t, cli, "place", "--access-mode", "RWX"); err == nil || !strings.Contains(out, `required flag(s) "capacity" not set`) {
		t.Fatalf("place without --capacity: %v\n%s", err, out)
	}
	if out, err := run(t, cli, "place", "--capacity", "lots"); err == nil || !strings.Contains(out, "(HTTP 400): --capacity:") {
		t.Fatalf("place --capacity lots: %v\n%s", err, out)
	}

	// Rotate to explicit credentials read from files.
	type connection struct {
		Connection struct {
			AuthType              string    `json:"auth_type"`
			CredentialsUpdateTime time.Time `json:"credentials_update_time"`
		}
	}
	var before connection
	if err := json.Unmarshal([]byte(mustRun(t, cli, "env", "get", "local-east", "-o", "json")), &before); err != nil {
		t.Fatal(err)
	}
	token, err := cluster.NewGatewayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "token"), []byte(token+"\n"))
	writeFile(t, filepath.Join(dir, "ca.crt"), cluster.CAData())
	out = mustRun(t, cli, "env", "rotate", "local-east", "--api-server", cluster.ServerURL(),
		"--ca-file", filepath.Join(dir, "ca.crt"), "--token-file", filepath.Join(dir, "token"), "-o", "json")
	var rotated connection
	if err := json.Unmarshal([]byte(out), &rotated); err != nil || rotated.Connection.AuthType != "token" ||
		!rotated.Connection.CredentialsUpdateTime.After(before.Connection.CredentialsUpdateTime) {
		t.Fatalf("env rotate (credentials updated %s before): %v\n%s", before.Connection.CredentialsUpdateTime, err, out)
	}
	if out := mustRun(t, cli, "env", "verify", "local-east"); !strings.Contains(out, "READY") {
		t.Fatalf("env verify:\n%s", out)
	}

	hostile := filepath.Join(dir, "hostile.kubeconfig")
	writeFile(t, hostile, []byte("apiVersion: v1\nusers:\n- name: u\n  user:\n    exec:\n      command: touch\n      args: ["+filepath.Join(dir, "pwned")+"]\n"))
	out, err = run(t, cli, "env", "add", "hostile", "--kubeconfig", hostile, "--namespace", "dcm")
	if err == nil || !strings.Contains(out, "INVALID_ARGUMENT (HTTP 400): --kubeconfig: users[0].user.exec") {
		t.Fatalf("hostile kubeconfig: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Fatal("the exec plugin ran")
	}

	adoptCommands(t, cli)
	volumeCommands(t, cli, g.Addr)

	mustRun(t, cli, "env", "rm", "local-east")
	if out, err := run(t, cli, "env", "get", "local-east"); err == nil || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("env get after rm: %v\n%s", err, out)
	}
	for _, secret := range []string{token, cluster.GatewayToken()} {
		if strings.Contains(g.Logs(), secret) {
			t.Fatal("a token reached the gateway's logs")
		}
	}
}

// volumeCommands drives the volume commands, the output formats and the
// CLI's wording of refusals against the gateway serving local-east.
func volumeCommands(t *testing.T, cli []string, addr string) {
	t.Helper()
	// The detailed view, not the list row.
	out := mustRun(t, cli, "env", "get", "local-east")
	for _, want := range []string{"Labels:", "site=east,tier=dev", "Allowed namespaces:", "dcm-scratch", "Zone:", "east-a",
		"Server:", "State:", "READY", "DCM registration:", "OFF: this gateway does not register environments with DCM", "Cluster:", "kube-system/"} {
		if !strings.Contains(out, want) {
			t.Fatalf("env get lacks %q:\n%s", want, out)
		}
	}
	// The harness's token lives a year.
	if !regexp.MustCompile(`Credentials expire:\s+\S+ \(in 36[45] days\)\n`).MatchString(out) {
		t.Fatalf("env get does not say when the credentials expire:\n%s", out)
	}
	// kubectl's selector forms, and -o name.
	if out := mustRun(t, cli, "env", "list", "-l", "tier", "-o", "name"); out != "environment/local-east\n" {
		t.Fatalf("env list -l tier -o name: %q", out)
	}
	if out := mustRun(t, cli, "env", "list", "-l", "!tier", "-o", "name"); out != "" {
		t.Fatalf("env list -l '!tier' -o name: %q", out)
	}
	// Shell completion offers the environments the gateway has.
	for _, args := range [][]string{{"__complete", "env", "get", ""}, {"__complete", "volume", "list", "-e", ""}} {
		if out := mustRun(t, cli, args...); !strings.Contains(out, "local-east\tREADY") {
			t.Fatalf("%v:\n%s", args, out)
		}
	}
	// host:port without a scheme is a gateway on plain http.
	if out := mustRun(t, append(cli, "SG_GATEWAY_URL="), "env", "list", "--gateway", addr, "-o", "name"); out != "environment/local-east\n" {
		t.Fatalf("--gateway %s: %q", addr, out)
	}

	// Create with an id, with short access-mode names, and read it back.
	out = mustRun(t, cli, "volume", "create", "db-1", "-e", "local-east", "--capacity", "1Gi", "--storage-class", "standard",
		"--access-mode", "rwo", "--label", "team=db", "-o", "json")
	var created struct {
		ID   string `json:"id"`
		Spec struct {
			ProviderHints struct {
				Kubernetes struct {
					AccessMode string `json:"access_mode"`
				} `json:"kubernetes"`
			} `json:"provider_hints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ID != "db-1" ||
		created.Spec.ProviderHints.Kubernetes.AccessMode != "ReadWriteOnce" {
		t.Fatalf("volume create db-1: %v\n%s", err, out)
	}
	// Without an id the gateway picks one (no uuidgen needed).
	picked := strings.TrimPrefix(strings.TrimSpace(mustRun(t, cli, "volume", "create", "-e", "local-east", "--name", "scratch",
		"--capacity", "1Gi", "-o", "name")), "volume/local-east/")
	if picked == "" || picked == "scratch" {
		t.Fatalf("volume create without an id named %q", picked)
	}
	out = mustRun(t, cli, "volume", "list", "-e", "local-east")
	if !strings.Contains(out, "db-1") || !strings.Contains(out, picked) || !strings.Contains(out, "CAPACITY") {
		t.Fatalf("volume list -e local-east:\n%s", out)
	}
	// --wait returns once the claim is bound; a claim that never binds ends
	// the wait with its status.
	mustRun(t, cli, "volume", "create", "db-1", "-e", "local-east", "--capacity", "1Gi", "--storage-class", "standard",
		"--access-mode", "RWO", "--label", "team=db", "--wait", "1m")
	if out, err := run(t, cli, "volume", "create", "stuck", "-e", "local-east", "--capacity", "1Gi", "--storage-class", "broken",
		"--wait", "2s"); err == nil || !strings.Contains(out, "volume stuck is still PROVISIONING after 2s") {
		t.Fatalf("volume create --wait on a class that never provisions: %v\n%s", err, out)
	}
	mustRun(t, cli, "volume", "delete", "stuck", "-e", "local-east")
	out = mustRun(t, cli, "volume", "get", "db-1", "-e", "local-east")
	for _, want := range []string{"Status:", "RUNNING", "Access mode:", "RWO", "Bound to:", "Labels:", "team=db"} {
		if !strings.Contains(out, want) {
			t.Fatalf("volume get lacks %q:\n%s", want, out)
		}
	}
	// The fleet list reads the records, which the status pipeline updates
	// a moment after the cluster's cache.
	poll.Until(t, 30*time.Second, "db-1 in the fleet list as running", func() bool {
		out = mustRun(t, cli, "volume", "list", "-A", "-o", "yaml", "--status", "running")
		return strings.Contains(out, "id: db-1")
	})
	if !strings.Contains(out, "volume_name: pvc-") {
		t.Fatalf("volume list -A -o yaml:\n%s", out)
	}
	if out := mustRun(t, cli, "volume", "list", "-A", "-o", "wide"); !strings.Contains(out, "BOUND TO") || !strings.Contains(out, "team=db") {
		t.Fatalf("volume list -A -o wide:\n%s", out)
	}
	// A take-over prints its own outcome only (here the gateway does not
	// register with DCM): nothing of the settings it applied first.
	if out, err := run(t, cli, "env", "apply", "local-east", "--dcm-take-over", "-o", "json"); err == nil ||
		!strings.Contains(out, "FAILED_PRECONDITION (HTTP 422)") || strings.Contains(out, "environment/local-east") || strings.Contains(out, `"id"`) {
		t.Fatalf("env apply --dcm-take-over on a gateway without DCM: %v\n%s", err, out)
	}
	// -o name is unique across environments.
	if out := mustRun(t, cli, "volume", "list", "-A", "-o", "name"); !strings.Contains(out, "volume/local-east/db-1\n") {
		t.Fatalf("volume list -A -o name:\n%s", out)
	}
	if out := mustRun(t, cli, "volume", "expand", "db-1", "-e", "local-east", "--capacity", "2Gi"); !strings.Contains(out, "2Gi") {
		t.Fatalf("volume expand:\n%s", out)
	}
	// --wait on an expansion returns once the volume runs at its new size.
	out = mustRun(t, cli, "volume", "expand", "db-1", "-e", "local-east", "--capacity", "3Gi", "--wait", "1m")
	if !regexp.MustCompile(`Status:\s+RUNNING\n`).MatchString(out) || !regexp.MustCompile(`Capacity:\s+3Gi\n`).MatchString(out) {
		t.Fatalf("volume expand --wait:\n%s", out)
	}
	// Snapshots of a volume of the CSI plugin's class: --wait returns once
	// READY; a refusal names the flag; a deletion waits until it is gone.
	mustRun(t, cli, "volume", "create", "snap-src", "-e", "local-east", "--capacity", "1Gi", "--storage-class", "snapshots", "--wait", "1m")
	if out, err := run(t, cli, "volume", "snapshot", "create", "nightly", "-e", "local-east", "--volume", "snap-src"); err == nil ||
		!strings.Contains(out, "no default VolumeSnapshotClass; name one of: snapshots") {
		t.Fatalf("volume snapshot create without a class where the driver has no default: %v\n%s", err, out)
	}
	if out, err := run(t, cli, "volume", "snapshot", "create", "nightly", "-e", "local-east", "--volume", "snap-src", "--class", "gold"); err == nil ||
		!strings.Contains(out, "--class: VolumeSnapshotClass gold does not exist") {
		t.Fatalf("volume snapshot create --class of a class that does not exist: %v\n%s", err, out)
	}
	out = mustRun(t, cli, "volume", "snapshot", "create", "nightly", "-e", "local-east", "--volume", "snap-src", "--class", "snapshots", "--wait", "1m")
	if !regexp.MustCompile(`Status:\s+READY\n`).MatchString(out) || !regexp.MustCompile(`Restore size:\s+1Gi\n`).MatchString(out) {
		t.Fatalf("volume snapshot create --wait:\n%s", out)
	}
	if out := mustRun(t, cli, "volume", "snapshot", "list", "-e", "local-east", "--volume", "snap-src", "-o", "name"); out != "snapshot/local-east/nightly\n" {
		t.Fatalf("volume snapshot list -o name: %q", out)
	}
	// Shell completion offers the environment's volumes, snapshots,
	// classes and tiers where a command names one.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"volume", "get", "-e", "local-east", ""}, "snap-src\tRUNNING"},
		{[]string{"volume", "snapshot", "create", "x", "-e", "local-east", "--volume", ""}, "snap-src\tRUNNING"},
		{[]string{"volume", "create", "x", "-e", "local-east", "--clone", ""}, "snap-src\tRUNNING"},
		{[]string{"volume", "snapshot", "get", "-e", "local-east", "--volume", "snap-src", ""}, "nightly\tREADY"},
		{[]string{"volume", "create", "x", "-e", "local-east", "--from-snapshot", ""}, "nightly\tREADY of snap-src"},
		{[]string{"volume", "create", "x", "-e", "local-east", "--storage-class", ""}, "snapshots\t"},
		{[]string{"volume", "retier", "snap-src", "-e", "local-east", "--class", ""}, "gold\tsnapshots"},
	} {
		if out := mustRun(t, cli, append([]string{"__complete"}, tc.args...)...); !strings.Contains(out, tc.want) {
			t.Fatalf("completion of %v offers no %q:\n%s", tc.args, tc.want, out)
		}
	}
	// Restore and clone through volume create.
	if out, err := run(t, cli, "volume", "create", "too-small", "-e", "local-east", "--capacity", "512Mi", "--storage-class", "snapshots",
		"--from-snapshot", "nightly"); err == nil || !strings.Contains(out, "--capacity") || !strings.Contains(out, "1Gi") {
		t.Fatalf("volume create --from-snapshot smaller than the restore size: %v\n%s", err, out)
	}
	for _, from := range [][]string{{"restored", "--from-snapshot", "nightly"}, {"cloned", "--clone", "snap-src"}} {
		out := mustRun(t, cli, "volume", "create", from[0], "-e", "local-east", "--capacity", "1Gi", "--storage-class", "snapshots",
			from[1], from[2], "--wait", "1m", "-o", "json")
		if !strings.Contains(out, `"RUNNING"`) || !strings.Contains(out, `"`+from[2]+`"`) {
			t.Fatalf("volume create %s %s --wait:\n%s", from[1], from[2], out)
		}
	}
	if out := mustRun(t, cli, "volume", "snapshot", "delete", "nightly", "-e", "local-east", "--volume", "snap-src", "--wait", "1m"); out != "snapshot/nightly deleted\n" {
		t.Fatalf("volume snapshot delete --wait: %q", out)
	}
	if out, err := run(t, cli, "volume", "snapshot", "get", "nightly", "-e", "local-east", "--volume", "snap-src"); err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("volume snapshot get after its deletion: %v\n%s", err, out)
	}
	// Tiers: --wait returns once the volume is on it; one the driver
	// refuses is refused with its reason, naming the flag.
	out = mustRun(t, cli, "volume", "retier", "snap-src", "-e", "local-east", "--class", "gold", "--wait", "1m")
	if !regexp.MustCompile(`Tier:\s+gold\n`).MatchString(out) {
		t.Fatalf("volume retier --wait:\n%s", out)
	}
	if out, err := run(t, cli, "volume", "retier", "snap-src", "-e", "local-east", "--class", "platinum", "--wait", "1m"); err == nil ||
		!strings.Contains(out, "--class: the driver refused platinum") || !strings.Contains(out, `tier "platinum" is not one of`) {
		t.Fatalf("volume retier onto a tier the driver refuses: %v\n%s", err, out)
	}
	for _, id := range []string{"restored", "cloned", "snap-src"} {
		mustRun(t, cli, "volume", "delete", id, "-e", "local-east", "--wait", "1m")
	}
	// The fleet's classes: -e like everywhere else; expandable is a switch.
	if out := mustRun(t, cli, "classes", "-e", "local-east", "--expandable", "-o", "name"); !strings.Contains(out, "storageclass/standard\n") {
		t.Fatalf("classes -e local-east --expandable:\n%s", out)
	}
	fixed := mustRun(t, cli, "classes", "-e", "local-east", "--expandable=false", "-o", "name")
	if strings.Contains(fixed, "storageclass/standard\n") || fixed == "" {
		t.Fatalf("classes --expandable=false lists an expandable class, or none:\n%s", fixed)
	}

	// Refusals speak the CLI's words.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"volume", "create", "-e", "local-east", "--name", "x", "--capacity", "lots"}, "(HTTP 400): --capacity:"},
		{[]string{"volume", "create", "Bad_Id", "-e", "local-east", "--capacity", "1Gi"}, "(HTTP 400): volume id:"},
		{[]string{"volume", "expand", "db-1", "-e", "local-east", "--capacity", "1Gi"}, "(HTTP 400): --capacity: must be larger"},
		{[]string{"volume", "create", "-e", "local-east", "--name", "x", "--capacity", "1Gi", "--access-mode", "many"}, "--access-mode \"many\": want RWO, ROX, RWX (or"},
		{[]string{"volume", "create", "-e", "local-east", "--name", "x", "--capacity", "1Gi", "--access-mode", "RWOP"}, "--access-mode \"RWOP\": want RWO, ROX, RWX (or"},
		{[]string{"volume", "list", "-e", "nowhere"}, "NOT_FOUND (HTTP 404)"},
		{[]string{"volume", "list"}, "give either --environment ID or --all-environments"},
		{[]string{"env", "rm", "local-east"}, "or use --force to forget them"},
		{[]string{"env", "list", "-l", "tier in (a"}, "(HTTP 400): --selector:"},
		{[]string{"env", "add", "Bad_Id", "--kubeconfig", "/dev/null"}, "(HTTP 400): environment id:"},
		{[]string{"env", "lst"}, "Did you mean this?\n\tget\n\tlist"},
		{[]string{"env", "list", "-o", "xml"}, "--output must be one of table, wide, json, yaml, name"},
		{[]string{"volume", "list", "-A", "--bogus"}, "unknown flag: --bogus\nRun 'storage-gateway volume list --help' for usage"},
		{[]string{"volume", "get", "-e", "local-east"}, "storage-gateway volume get needs ID; usage: storage-gateway volume get ID [flags]"},
		{[]string{"volume", "get", "a", "b", "-e", "local-east"}, "storage-gateway volume get takes no argument \"b\""},
		{[]string{"classes", "--expandable=maybe"}, "invalid argument \"maybe\" for \"--expandable\""},
	} {
		out, err := run(t, cli, c.args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%v: want a failure saying %q, got %v:\n%s", c.args, c.want, err, out)
		}
		if strings.Contains(out, "force=true") || strings.Contains(out, "label_selector") {
			t.Errorf("%v speaks API words:\n%s", c.args, out)
		}
	}

	if out := mustRun(t, cli, "volume", "delete", picked, "-e", "local-east"); out != "volume/"+picked+" deleted\n" {
		t.Fatalf("volume delete %s: %q", picked, out)
	}
	// --wait on a deletion returns once the claim is gone.
	if out := mustRun(t, cli, "volume", "delete", "db-1", "-e", "local-east", "--wait", "1m"); out != "volume/db-1 deleted\n" {
		t.Fatalf("volume delete --wait: %q", out)
	}
	if out, err := run(t, cli, "volume", "get", "db-1", "-e", "local-east"); err == nil || !strings.Contains(out, "NOT_FOUND") {
		t.Fatalf("volume get after delete --wait: %v\n%s", err, out)
	}
	// The claims terminate; then the environment has no volumes left.
	poll.Until(t, 30*time.Second, "deleted volumes no longer counted", func() bool {
		// (not unadopted_volume_count)
		return regexp.MustCompile(`(?m)^\s+volume_count: 0$`).MatchString(mustRun(t, cli, "env", "get", "local-east", "-o", "yaml"))
	})
}

// adoptCommands adopts the claim another provider made in local-east: the
// environment shows it, a dry run lists it, the adoption serves it, a second
// adoption finds nothing new; the adopted volume is then deleted like any.
func adoptCommands(t *testing.T, cli []string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "env get showing the unadopted claim", func() bool {
		return strings.Contains(mustRun(t, cli, "env", "get", "local-east"), "Unadopted claims:")
	})
	if out := mustRun(t, cli, "env", "get", "local-east"); !strings.Contains(out, "1 labelled for DCM by another provider (storage-gateway env adopt local-east)") {
		t.Fatalf("env get:\n%s", out)
	}
	// The cut-over's settings: the old provider's name, registration off, then on.
	register := func() bool {
		var env struct {
			Dcm struct {
				Register bool `json:"register"`
			} `json:"dcm"`
		}
		if err := json.Unmarshal([]byte(mustRun(t, cli, "env", "get", "local-east", "-o", "json")), &env); err != nil {
			t.Fatal(err)
		}
		return env.Dcm.Register
	}
	mustRun(t, cli, "env", "apply", "local-east", "--dcm-provider-name", "k8s-storage-sp-east", "--dcm-register=false")
	out := mustRun(t, cli, "env", "get", "local-east")
	if register() || !regexp.MustCompile(`DCM provider name:\s+k8s-storage-sp-east\n`).MatchString(out) {
		t.Fatalf("env get after apply --dcm-provider-name --dcm-register=false:\n%s", out)
	}
	mustRun(t, cli, "env", "apply", "local-east", "--dcm-register")
	if out = mustRun(t, cli, "env", "get", "local-east"); !register() || !strings.Contains(out, "k8s-storage-sp-east") {
		t.Fatalf("env get after apply --dcm-register:\n%s", out)
	}
	out = mustRun(t, cli, "env", "adopt", "local-east", "--dry-run")
	if !strings.Contains(out, "would adopt  dcm-volumes") || !strings.Contains(out, "peer-made") ||
		!strings.Contains(out, "local-east: 1 would adopt, 0 skipped, 0 served already (namespaces dcm-volumes, dcm-scratch)") {
		t.Fatalf("env adopt --dry-run:\n%s", out)
	}
	if out, err := run(t, cli, "volume", "get", "peer-made", "-e", "local-east"); err == nil {
		t.Fatalf("a dry run adopted:\n%s", out)
	}
	if out := mustRun(t, cli, "env", "adopt", "local-east", "-o", "name"); out != "volume/local-east/peer-made\n" {
		t.Fatalf("env adopt -o name: %q", out)
	}
	if out := mustRun(t, cli, "env", "adopt", "local-east", "-n", "dcm-volumes"); out != "local-east: 0 adopted, 0 skipped, 1 served already (namespaces dcm-volumes)\n" {
		t.Fatalf("env adopt again: %q", out)
	}
	if out, err := run(t, cli, "env", "adopt", "local-east", "--namespace", "kube-system"); err == nil || !strings.Contains(out, "(HTTP 400): --namespace: is not one of the environment's namespaces") {
		t.Fatalf("env adopt --namespace kube-system: %v\n%s", err, out)
	}
	if out := mustRun(t, cli, "volume", "delete", "peer-made", "-e", "local-east"); out != "volume/peer-made deleted\n" {
		t.Fatalf("volume delete peer-made: %q", out)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
