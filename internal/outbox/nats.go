package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATSOptions selects how the gateway reaches NATS.
type NATSOptions struct {
	// URL of an external server; empty starts an embedded server.
	URL string
	// EmbeddedListen is the embedded server's TCP listen address; empty keeps
	// it reachable only through the in-process connection.
	EmbeddedListen string
	// EmbeddedStoreDir is the embedded server's JetStream store directory.
	EmbeddedStoreDir string
}

// NATS is the gateway's NATS connection and, in embedded mode, the server it
// runs. Close releases both.
type NATS struct {
	Conn     *nats.Conn
	embedded *server.Server
	logger   *slog.Logger
}

// embeddedStartTimeout bounds how long an embedded server may take to accept
// connections (JetStream recovers its store first).
const embeddedStartTimeout = 30 * time.Second

// ConnectNATS connects to the configured NATS server, starting the embedded one
// when no URL is given. An unreachable external server is not fatal: the
// connection keeps retrying in the background and readiness reports it.
func ConnectNATS(opts NATSOptions, logger *slog.Logger) (*NATS, error) {
	logger = logger.With("component", "nats")
	n := &NATS{logger: logger}
	connOpts := []nats.Option{
		nats.Name("storage-gateway"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { logger.Info("nats reconnected", "server", c.ConnectedUrlRedacted()) }),
	}
	url := opts.URL
	if url == "" {
		srv, err := startEmbedded(opts, logger)
		if err != nil {
			return nil, err
		}
		n.embedded = srv
		connOpts = append(connOpts, nats.InProcessServer(srv))
	} else {
		connOpts = append(connOpts, nats.RetryOnFailedConnect(true))
	}
	conn, err := nats.Connect(url, connOpts...)
	if err != nil {
		n.shutdownEmbedded()
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	n.Conn = conn
	return n, nil
}

func startEmbedded(opts NATSOptions, logger *slog.Logger) (*server.Server, error) {
	sopts := &server.Options{
		ServerName: "storage-gateway-embedded",
		JetStream:  true,
		StoreDir:   opts.EmbeddedStoreDir,
		NoSigs:     true,
		DontListen: opts.EmbeddedListen == "",
	}
	if opts.EmbeddedListen != "" {
		host, portStr, err := net.SplitHostPort(opts.EmbeddedListen)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS listen address: %w", err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS listen port: %w", err)
		}
		if port == 0 {
			port = server.RANDOM_PORT
		} else if err := checkFree(opts.EmbeddedListen); err != nil {
			return nil, err
		}
		sopts.Host, sopts.Port = host, port
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	srv.SetLoggerV2(slogAdapter{logger.With("embedded", true)}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(embeddedStartTimeout) {
		srv.Shutdown()
		return nil, errors.New("embedded NATS did not become ready (is the listen address in use?)")
	}
	logger.Info("embedded NATS started", "jetstream_store", opts.EmbeddedStoreDir, "listen", listenDescription(srv))
	return srv, nil
}

// checkFree fails fast when the listen address is taken; the server itself
// would only log it and never become ready.
func checkFree(addr string) error {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("embedded NATS listen address %s: %w", addr, err)
	}
	return ln.Close()
}

func listenDescription(srv *server.Server) string {
	if addr := srv.Addr(); addr != nil {
		return addr.String()
	}
	return "in-process only"
}

// EmbeddedAddr is the embedded server's TCP address, or "" when it has none
// (external server, or listening disabled).
func (n *NATS) EmbeddedAddr() string {
	if n.embedded == nil || n.embedded.Addr() == nil {
		return ""
	}
	return n.embedded.Addr().String()
}

// Check reports whether the connection is up; readiness uses it.
func (n *NATS) Check(context.Context) error {
	if n.Conn.IsConnected() {
		return nil
	}
	return fmt.Errorf("not connected (state %s)", n.Conn.Status())
}

// Close drains the connection (flushing anything buffered) within ctx and shuts
// the embedded server down.
func (n *NATS) Close(ctx context.Context) {
	if n.Conn != nil && !n.Conn.IsClosed() {
		done := make(chan struct{})
		n.Conn.SetClosedHandler(func(*nats.Conn) { close(done) })
		if err := n.Conn.Drain(); err != nil {
			n.Conn.Close()
		} else {
			select {
			case <-done:
			case <-ctx.Done():
				n.Conn.Close()
			}
		}
	}
	n.shutdownEmbedded()
}

func (n *NATS) shutdownEmbedded() {
	if n.embedded != nil {
		n.embedded.Shutdown()
		n.embedded.WaitForShutdown()
	}
}

// slogAdapter routes the embedded server's log lines into the gateway's log.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
