package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Dial limits: the timeout keeps an unreachable cluster from holding a
// request open; keep-alive lets long watches notice a dead peer.
const (
	dialTimeout = 10 * time.Second
	keepAlive   = 30 * time.Second
)

// DialContext connects like [net.Dialer.DialContext] but refuses any address
// Check refuses. It has the signature of [net/http.Transport.DialContext] so
// it can be plugged into cluster transports directly. Only TCP is allowed:
// the API server speaks nothing else, and a unix socket has no IP address to
// check. A refusal comes back wrapped in a *net.OpError; errors.As still
// finds the *DeniedError inside.
func (p Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("egress: network %q refused: only tcp is allowed", network)
	}
	dialer := net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive, ControlContext: p.control}
	return dialer.DialContext(ctx, network, address)
}

// control runs after resolution and before connect(2), once per address
// tried, so it sees exactly what the socket will reach. An address it cannot
// parse is refused: failing open here would defeat the policy.
func (p Policy) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	addrPort, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: cannot check dial address %q: %w", address, err)
	}
	return p.Check(addrPort.Addr())
}
