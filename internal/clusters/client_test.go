package clusters

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/test/poll"
)

// A connection the pool checks itself sends no HTTP/2 pings while idle;
// client-go's own transport, as the probe's and the writes' clients use,
// does. client-go pings after HTTP2_READ_IDLE_TIMEOUT_SECONDS without a
// frame (30 by default; 1 here).
func TestOnlyConnectionsNobodyChecksPingWhileIdle(t *testing.T) {
	t.Setenv("HTTP2_READ_IDLE_TIMEOUT_SECONDS", "1")
	srv := newPingCounter(t)
	idle := func(checked bool) *http.Client {
		t.Helper()
		_, client, err := newBaseClient(kubeconfig.Connection{Server: srv.url, CAData: srv.ca, Token: "t"},
			ClientOptions{Egress: egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}}, checked)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(srv.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("the check went over %s; want HTTP/2", resp.Proto)
		}
		return client
	}

	start := time.Now()
	unchecked := idle(false)
	poll.Until(t, 10*time.Second, "client-go's transport pings its idle connection", func() bool { return srv.pings.Load() > 0 })
	firstPing := time.Since(start)
	utilnet.CloseIdleConnectionsFor(unchecked.Transport) // client-go's wrappers hide it from the client

	before := srv.pings.Load()
	checked := idle(true)
	defer utilnet.CloseIdleConnectionsFor(checked.Transport)
	time.Sleep(2*firstPing + time.Second)
	if n := srv.pings.Load() - before; n != 0 {
		t.Fatalf("the checked connection sent %d pings idle for %s; want none", n, 2*firstPing+time.Second)
	}
}

// pingCounter is an HTTP/2 server over TLS that counts the PING frames its
// clients send, acknowledgements aside: its listener ends TLS itself, so the
// server reads the plain text through pingFrames (HTTP/2 without TLS, as
// ALPN agreed).
type pingCounter struct {
	url   string
	ca    []byte
	pings atomic.Int32
}

func newPingCounter(t *testing.T) *pingCounter {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pingCounter{url: "https://" + ln.Addr().String(), ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	tlsLn := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13})
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: protocols, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(sniffing{Listener: tlsLn, pings: &p.pings}) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// sniffing hands out its connections read through pingFrames.
type sniffing struct {
	net.Listener
	pings *atomic.Int32
}

func (s sniffing) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &pingFrames{Conn: c, pings: s.pings}, nil
}

// pingFrames counts the PING frames (not their acknowledgements) in the
// HTTP/2 stream a client sends: the connection preface, then frames, each
// a header and its payload.
// frameHeaderLen is the size of an HTTP/2 frame header.
const frameHeaderLen = 9

type pingFrames struct {
	net.Conn
	pings    *atomic.Int32
	buf      []byte
	prefaced bool
}

func (f *pingFrames) Read(b []byte) (int, error) {
	n, err := f.Conn.Read(b)
	f.buf = append(f.buf, b[:n]...)
	if !f.prefaced {
		if len(f.buf) < len(http2.ClientPreface) {
			return n, err
		}
		f.buf, f.prefaced = f.buf[len(http2.ClientPreface):], true
	}
	for len(f.buf) >= frameHeaderLen {
		h, _ := http2.ReadFrameHeader(bytes.NewReader(f.buf)) // a whole header is there
		size := frameHeaderLen + int(h.Length)
		if len(f.buf) < size {
			break
		}
		if h.Type == http2.FramePing && !h.Flags.Has(http2.FlagPingAck) {
			f.pings.Add(1)
		}
		f.buf = f.buf[size:]
	}
	return n, err
}
