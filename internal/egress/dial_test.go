package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recordingListener is a real TCP listener on 127.0.0.1 that hands every
// accepted connection to the test, so a test can prove that a refused dial
// never reached the socket.
type recordingListener struct {
	port     string
	accepts  atomic.Int32
	accepted chan net.Conn
}

func listenLoopback(t *testing.T) *recordingListener {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &recordingListener{accepted: make(chan net.Conn, 8)}
	l.port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	go func() {
		defer close(l.accepted)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepts.Add(1)
			l.accepted <- conn
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for conn := range l.accepted {
			conn.Close()
		}
	})
	return l
}

// nextAccepted returns the next connection the listener accepted.
func (l *recordingListener) nextAccepted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case conn := <-l.accepted:
		return conn
	case <-time.After(5 * time.Second):
		t.Fatal("listener accepted nothing")
		return nil
	}
}

// expectOnly checks that client's connection is the first and only one the
// listener accepted. Accepts come off the backlog in order, so a connection
// made by an earlier, supposedly refused dial would be accepted first.
func (l *recordingListener) expectOnly(t *testing.T, client net.Conn) {
	t.Helper()
	server := l.nextAccepted(t)
	if server.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("listener accepted %s before %s: a refused dial connected",
			server.RemoteAddr(), client.LocalAddr())
	}
	if n := l.accepts.Load(); n != 1 {
		t.Fatalf("listener accepted %d connections, want 1", n)
	}
}

func dial(t *testing.T, p Policy, address string) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := p.DialContext(ctx, "tcp", address)
	if err == nil {
		t.Cleanup(func() { conn.Close() })
	}
	return conn, err
}

func TestDialContext(t *testing.T) {
	defaults, err := ParseCIDRs(DefaultAllowedCIDRs)
	if err != nil {
		t.Fatal(err)
	}
	defaultPolicy := Policy{Allowed: defaults}
	loopbackPolicy := Policy{Allowed: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	}}
	tests := []struct {
		name   string
		policy Policy
		host   string
		refuse bool
	}{
		{"default refuses loopback IP", defaultPolicy, "127.0.0.1", true},
		{"default refuses mapped loopback", defaultPolicy, "::ffff:127.0.0.1", true},
		// A host name: only the resolved address shows it is loopback.
		{"default refuses localhost", defaultPolicy, "localhost", true},
		{"empty list refuses loopback", Policy{}, "127.0.0.1", true},
		{"allow-list opens loopback IP", loopbackPolicy, "127.0.0.1", false},
		{"allow-list opens localhost", loopbackPolicy, "localhost", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listenLoopback(t)
			conn, err := dial(t, tt.policy, net.JoinHostPort(tt.host, l.port))
			if !tt.refuse {
				if err != nil {
					t.Fatalf("dial %s: %v", tt.host, err)
				}
				l.expectOnly(t, conn)
				return
			}
			assertDenied(t, err)
			probe, err := dial(t, loopbackPolicy, net.JoinHostPort("127.0.0.1", l.port))
			if err != nil {
				t.Fatalf("probe dial: %v", err)
			}
			l.expectOnly(t, probe)
		})
	}
}

// assertDenied checks that a dial error is the policy's refusal, reachable
// through the *net.OpError the dialer wraps it in.
func assertDenied(t *testing.T, err error) {
	t.Helper()
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("dial error = %v (%T), want a *net.OpError", err, err)
	}
	var denied *DeniedError
	if !errors.As(err, &denied) {
		t.Fatalf("dial error = %v, want a wrapped *DeniedError", err)
	}
	if !strings.HasPrefix(denied.Reason, "loopback address") {
		t.Errorf("refusal reason = %q, want loopback", denied.Reason)
	}
}

func TestDialContextRefusesNonTCP(t *testing.T) {
	open := Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}
	for _, network := range []string{"udp", "udp4", "ip4:icmp", "unix"} {
		t.Run(network, func(t *testing.T) {
			conn, err := open.DialContext(t.Context(), network, "127.0.0.1:53")
			if err == nil {
				conn.Close()
				t.Fatalf("DialContext(%q) succeeded, want refusal", network)
			}
			if !strings.Contains(err.Error(), "only tcp is allowed") {
				t.Errorf("DialContext(%q) error = %v", network, err)
			}
		})
	}
}
