// Command spm runs DCM's service-provider-manager (built from the pinned
// module) for local runs: it creates its Postgres database if missing and
// then becomes the manager process (exec), listening on -listen and reading
// status events from -nats. `make run DCM=1` runs it beside the gateway.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/dcm-project/storage-gateway/internal/postgres"
	"github.com/dcm-project/storage-gateway/test/dcmtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spm:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8081", "address of the manager's API")
	natsURL := flag.String("nats", "nats://127.0.0.1:4223", "NATS server with JetStream (the gateway's embedded one by default)")
	database := flag.String("database", "service_provider", "Postgres database on the local server (created if missing)")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "postgres://postgres@127.0.0.1:5432/" + *database + "?sslmode=disable"
	if err := postgres.EnsureDatabase(ctx, url); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "spm: building DCM's service-provider-manager (first time only, ~1 min)")
	bin, err := dcmtest.Build(ctx)
	if err != nil {
		return err
	}
	env := append(os.Environ(), "DB_TYPE=pgsql", "DB_HOST=127.0.0.1", "DB_PORT=5432", "DB_USER=postgres",
		"DB_NAME="+*database, "SVC_ADDRESS="+*listen, "NATS_URL="+*natsURL)
	fmt.Fprintf(os.Stderr, "spm: DCM service-provider-manager on http://%s/api/v1alpha1\n", *listen)
	return syscall.Exec(bin, []string{bin}, env)
}
