// Command kind-up creates the kind clusters described in environments/kind
// (needs a container engine), prepares each for the gateway with the same
// namespaces, RBAC and token the harness uses, and writes the gateway's
// kubeconfig for each into -out. Existing clusters are reused.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/dcm-project/storage-gateway/test/repo"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster"

	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/kind"
)

func main() {
	dir := flag.String("specs", filepath.Join(repo.Root(), "environments", "kind"), "directory of kind cluster files")
	out := flag.String("out", filepath.Join(os.TempDir(), "storage-gateway-kind"), "directory for the gateway kubeconfigs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "kind-up:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir, out string) error {
	specs, err := kind.LoadSpecs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	provider := cluster.NewProvider()
	existing, err := provider.List()
	if err != nil {
		return fmt.Errorf("list kind clusters (is a container engine running?): %w", err)
	}
	for _, s := range specs {
		name := s.ClusterName()
		if !slices.Contains(existing, name) {
			fmt.Fprintf(os.Stderr, "kind-up: creating %s\n", name)
			if err := provider.Create(name, cluster.CreateWithV1Alpha4Config(&s.Config), cluster.CreateWithWaitForReady(3*time.Minute)); err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
		}
		raw, err := provider.KubeConfig(name, false)
		if err != nil {
			return err
		}
		admin, err := clientcmd.RESTConfigFromKubeConfig([]byte(raw))
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(admin)
		if err != nil {
			return err
		}
		token, err := harness.GrantGateway(ctx, client, s.Environment.Namespaces())
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		kubeconfig, err := harness.TokenKubeconfig(name, admin.Host, admin.CAData, token, s.Environment.Namespace)
		if err != nil {
			return err
		}
		path := filepath.Join(out, s.Environment.ID+".kubeconfig")
		if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "kind-up: %s ready; gateway kubeconfig %s\n", name, path)
	}
	return nil
}
