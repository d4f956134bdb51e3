// Command reset drops what `make run` keeps from one run to the next, so the
// next starts afresh: the gateway's database (SG_DATABASE_URL, read as serve
// reads it), the database of DCM's manager that `make run DCM=1` uses, and
// the state directory (key ring, token file, cluster kubeconfigs, the
// embedded NATS store). Stop `make run` first.
//
//	go run ./cmd/local-reset -state ~/.local/state/storage-gateway -dcm-database service_provider \
//	    -gateway http://127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "local-reset:", err)
		os.Exit(1)
	}
}

func run() error {
	state := flag.String("state", "", "the state directory make run uses (removed)")
	dcmDatabase := flag.String("dcm-database", "", "the database of DCM's manager on the same server (dropped)")
	gateway := flag.String("gateway", "", "where make run serves: nothing is reset while something answers there")
	flag.Parse()
	if *state == "" {
		return errors.New("-state is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// make run holds this lock for as long as any of its processes lives
	// (see cmd/local-clusters, LockFile).
	if lock, err := os.Open(filepath.Join(*state, "make-run.lock")); err == nil {
		held := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
		_ = lock.Close()
		if held {
			return fmt.Errorf("make run is running with %s: stop make run first (dropping its database under it would break it)", *state)
		}
	}
	if *gateway != "" {
		if u, err := url.Parse(*gateway); err == nil {
			if conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", u.Host); err == nil {
				_ = conn.Close()
				return fmt.Errorf("something listens at %s: stop make run first (dropping its database under it would break it)", u.Host)
			}
		}
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	databases := []string{cfg.DatabaseURL}
	if *dcmDatabase != "" {
		u, err := url.Parse(cfg.DatabaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return errors.New("SG_DATABASE_URL: use the URL form to reset the DCM database beside it")
		}
		u.Path = "/" + *dcmDatabase
		databases = append(databases, u.String())
	}
	for _, db := range databases {
		if err := postgres.DropDatabase(ctx, db); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(*state); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "local-reset: dropped the local databases and removed %s; the next make run starts afresh\n", *state)
	return nil
}
