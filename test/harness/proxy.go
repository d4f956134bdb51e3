package harness

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// proxy is a TCP relay in front of an API server. The gateway reaches the
// cluster only through it, so a test can make the cluster unreachable without
// stopping it: a cut proxy drops every open connection and then accepts new
// ones but never answers, as a dead network path does. A frozen proxy
// keeps every connection open and passes nothing either way until thawed,
// as an API server stopped with SIGSTOP looks to its clients.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// thawed is closed while the proxy passes bytes, and replaced by an
	// open channel while it is frozen.
	thawed chan struct{}
}

func newProxy(target string) (*proxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, thawed: make(chan struct{})}
	close(p.thawed)
	p.wg.Go(p.acceptLoop)
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		if p.isCut() {
			continue // black hole: held open, never answered, closed on restore
		}
		p.wg.Go(func() { p.relay(c) })
	}
}

func (p *proxy) relay(client net.Conn) {
	defer p.drop(client)
	server, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.drop(server)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, p.gated(client)); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, p.gated(server)); done <- struct{}{} }()
	<-done
}

// gated passes what it reads from r on only while the proxy is not
// frozen: bytes read while it is (or by a read that was waiting when it
// froze) are held until it thaws, as a stopped process holds them.
func (p *proxy) gated(r io.Reader) io.Reader {
	return readerFunc(func(b []byte) (int, error) {
		n, err := r.Read(b)
		p.mu.Lock()
		thawed := p.thawed
		p.mu.Unlock()
		<-thawed
		return n, err
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// setFrozen freezes or thaws every relay.
func (p *proxy) setFrozen(frozen bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		if frozen {
			p.thawed = make(chan struct{})
		}
	default:
		if !frozen {
			close(p.thawed)
		}
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// setCut cuts or restores the path. Both directions close every open
// connection: cutting kills live streams (watches see the break), restoring
// frees black-holed connections so clients retry at once.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.setFrozen(false)
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}
