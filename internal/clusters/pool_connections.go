package clusters

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// connections are the TCP connections a cluster's background clients
// (watches, health checks) have open, so that stopping the cluster closes
// every one of them. CloseIdleConnections alone is not enough: an HTTP/2
// stream cancelled a moment earlier may still be unwinding, so its
// connection is not idle yet and would stay open, with its reader goroutine,
// until the transport's idle timeout.
type connections struct {
	mu     sync.Mutex
	open   map[*trackedConn]struct{}
	closed bool
}

func newConnections() *connections {
	return &connections{open: map[*trackedConn]struct{}{}}
}

// track makes client dial through s. It must run before the client sends its
// first request. onBroken, when set, hears of a connection of the client
// that failed while s was open: the server or the path to it went away
// (a reset, an end of stream, a connection the HTTP/2 transport closed for
// a lost ping).
func (s *connections) track(client *http.Client, onBroken func()) error {
	transport := baseTransport(client.Transport)
	if transport == nil || transport.DialContext == nil {
		return errors.New("cluster client: unexpected transport; cannot track its connections")
	}
	dial := transport.DialContext
	transport.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return s.add(conn, onBroken)
	}
	return nil
}

// baseTransport finds the *http.Transport beneath client-go's wrappers.
func baseTransport(rt http.RoundTripper) *http.Transport {
	for {
		switch t := rt.(type) {
		case *http.Transport:
			return t
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return nil
		}
	}
}

func (s *connections) add(conn net.Conn, onBroken func()) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = conn.Close()
		return nil, net.ErrClosed
	}
	tracked := &trackedConn{Conn: conn, owner: s, onBroken: onBroken}
	s.open[tracked] = struct{}{}
	return tracked, nil
}

// anyOpen reports whether a connection is open: a request sent now need
// not dial.
func (s *connections) anyOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open) > 0
}

// closeAll closes every open connection and refuses new ones.
func (s *connections) closeAll() {
	s.mu.Lock()
	open := s.open
	s.open, s.closed = nil, true
	s.mu.Unlock()
	for conn := range open {
		_ = conn.Conn.Close()
	}
}

// drop closes every open connection but keeps dialling new ones, without
// telling onBroken of them: a failed health check asks for it.
func (s *connections) drop() {
	s.mu.Lock()
	open := s.open
	if !s.closed {
		s.open = map[*trackedConn]struct{}{}
	}
	for conn := range open {
		conn.dropped = true
	}
	s.mu.Unlock()
	for conn := range open {
		_ = conn.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	owner    *connections
	onBroken func()
	// dropped is set, under owner.mu, when drop closes the connection.
	dropped bool
}

// Read tells onBroken of a failed read unless the cluster is closing its
// connections: the HTTP/2 reader is the first to see a connection end.
func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.onBroken != nil {
		c.owner.mu.Lock()
		closing := c.owner.closed || c.dropped
		c.owner.mu.Unlock()
		if !closing {
			c.onBroken()
		}
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.owner.mu.Lock()
	delete(c.owner.open, c)
	c.owner.mu.Unlock()
	return c.Conn.Close()
}
