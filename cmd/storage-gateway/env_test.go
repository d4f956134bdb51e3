package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/pgtest"
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
	manifest := filepath.Join(harness.RepoRoot(), "environments", "local-east.yaml")

	out := mustRun(t, cli, "env", "add", "-f", manifest, "--kubeconfig", kubeconfig)
	if !strings.Contains(out, "local-east") || !strings.Contains(out, "READY") || !strings.Contains(out, "dcm-volumes,dcm-scratch") {
		t.Fatalf("env add:\n%s", out)
	}

	var list []struct {
		ID     string            `json:"id"`
		Labels map[string]string `json:"labels"`
		Status struct{ State string }
	}
	if err := json.Unmarshal([]byte(mustRun(t, cli, "env", "list", "-o", "json", "--label", "site=east")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "local-east" || list[0].Labels["tier"] != "dev" || list[0].Status.State != "READY" {
		t.Fatalf("env list: %+v", list)
	}

	// The fleet matrix: one row per class, one column per environment.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out, "shared-files") && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		out = mustRun(t, cli, "classes")
	}
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
	var rwx []struct{ Name string }
	if err := json.Unmarshal([]byte(mustRun(t, cli, "classes", "--access-mode", "ReadWriteMany", "-o", "json")), &rwx); err != nil {
		t.Fatal(err)
	}
	if len(rwx) != 1 || rwx[0].Name != "shared-files" {
		t.Fatalf("classes --access-mode ReadWriteMany: %+v", rwx)
	}
	if out, err := run(t, cli, "classes", "--expandable", "maybe"); err == nil || !strings.Contains(out, "--expandable must be true or false") {
		t.Fatalf("classes --expandable maybe: %v\n%s", err, out)
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
	if err == nil || !strings.Contains(out, "INVALID_ARGUMENT (HTTP 400): kubeconfig.users[0].user.exec") {
		t.Fatalf("hostile kubeconfig: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Fatal("the exec plugin ran")
	}

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

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
