package clusters

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/dcm-project/storage-gateway/internal/egress"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
	"github.com/dcm-project/storage-gateway/internal/version"
)

// ClientOptions are the operator's settings for every cluster connection.
type ClientOptions struct {
	// Egress decides which resolved addresses may be dialled.
	Egress egress.Policy
	// Timeout bounds each request (0 = none, for watches).
	Timeout time.Duration
	// QPS and Burst rate-limit requests to one cluster, unless RateLimiter
	// (shared by all of an environment's clients, see Limiters) is set; it
	// slows down when the cluster answers 429.
	QPS         float32
	Burst       int
	RateLimiter *pacedLimiter
	// Use names what the client is for in the request counts: watch,
	// health, write or probe.
	Use string
	// OnDenied, if set, is called whenever the cluster answers a request
	// with 401 or 403: the credentials may have lost permissions.
	OnDenied func()
	// MaxResponseBytes bounds each response body (0: unbounded, for
	// informers' lists and watches).
	MaxResponseBytes int64
}

// Client is a typed clientset plus the HTTP client beneath it, so its idle
// connections can be released when the caller is done.
type Client struct {
	kubernetes.Interface
	http *http.Client
}

// Close releases the client's idle connections. client-go wraps the
// transport (bearer token, user agent) in round trippers that hide
// CloseIdleConnections from http.Client, so the wrappers are unwrapped.
func (c *Client) Close() { utilnet.CloseIdleConnectionsFor(c.http.Transport) }

// rateLimiter is l as client-go's interface: nil when there is none (a
// typed nil would not be).
func rateLimiter(l *pacedLimiter) flowcontrol.RateLimiter {
	if l == nil {
		return nil
	}
	return l
}

// NewClient builds a clientset from allow-listed settings only (see
// newHTTPClient).
func NewClient(conn kubeconfig.Connection, opts ClientOptions) (*Client, error) {
	cfg, httpClient, err := newHTTPClient(conn, opts)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		httpClient.CloseIdleConnections()
		return nil, fmt.Errorf("build cluster client: %w", err)
	}
	return &Client{Interface: cs, http: httpClient}, nil
}

// newHTTPClient builds the REST config and the HTTP client beneath a
// cluster's clients, without any typed client: a clientset holds one for
// every API group, which a client that needs one or two, or none, would
// carry for every environment. Proxies from the process environment
// are ignored (the egress check must see the real destination) and
// redirects are refused, so a bearer token never leaves for another host.
func newHTTPClient(conn kubeconfig.Connection, opts ClientOptions) (*rest.Config, *http.Client, error) {
	cfg, base, err := newBaseClient(conn, opts, false)
	if err != nil {
		return nil, nil, err
	}
	return cfg, forUse(base, opts), nil
}

// newBaseClient is newHTTPClient without what is particular to one use
// (forUse adds it): the REST config and a client holding the connections,
// their TLS and the credentials, which clients of several uses can share.
//
// checked says the caller checks the connection itself, often enough to
// find a dead one (the pool's health checks, which share the connection
// with the watches and close it when a check gets no answer). Its HTTP/2
// connection then sends no pings while idle. client-go's transport pings
// after 30 s without a frame: on an idle fleet, wake-ups and frames per
// environment beside the checks' own.
func newBaseClient(conn kubeconfig.Connection, opts ClientOptions, checked bool) (*rest.Config, *http.Client, error) {
	cfg := &rest.Config{
		Host:        conn.Server,
		BearerToken: conn.Token,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   conn.Insecure,
			ServerName: conn.TLSServerName,
			CAData:     conn.CAData,
			CertData:   conn.ClientCertData,
			KeyData:    conn.ClientKeyData,
		},
		UserAgent: "storage-gateway/" + version.Get().Version,
		// Protobuf, as Kubernetes' own controllers speak it: encoding and
		// decoding claims and watch events costs the API server and the
		// gateway a fraction of JSON's CPU. Every type the gateway reads
		// is built in; JSON stays accepted for anything answered without
		// protobuf.
		ContentConfig: rest.ContentConfig{
			ContentType:        runtime.ContentTypeProtobuf,
			AcceptContentTypes: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON,
		},
		QPS:         opts.QPS,
		Burst:       opts.Burst,
		RateLimiter: rateLimiter(opts.RateLimiter),
		Dial:        opts.Egress.DialContext,
		Proxy:       func(*http.Request) (*url.URL, error) { return nil, nil },
		// API server Warning headers are text a hostile endpoint chooses;
		// they never reach the gateway's logs.
		WarningHandler: rest.NoWarnings{},
	}
	if checked {
		transport, err := unpingedTransport(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("build cluster client: %w", err)
		}
		// client-go refuses TLS settings beside a transport of the
		// caller's: they are in the transport now.
		cfg.Transport, cfg.TLSClientConfig, cfg.Dial, cfg.Proxy = transport, rest.TLSClientConfig{}, nil, nil
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build cluster client: %w", err)
	}
	httpClient.CheckRedirect = egress.NoRedirects
	return cfg, httpClient, nil
}

// unpingedTransport is the transport client-go would build for cfg (its TLS,
// its dialer, no proxy, HTTP/2 where the server speaks it) except that its
// HTTP/2 connections send no pings while idle: net/http's HTTP/2 pings only
// when HTTP2Config.SendPingTimeout says so.
func unpingedTransport(cfg *rest.Config) (*http.Transport, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Transport{
		DialContext:         cfg.Dial,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}, nil
}

// forUse is a client over base's connections for one use (opts.Use): its
// timeout, its bound on answers, its request count and pacing feedback,
// and the notice of a denial.
func forUse(base *http.Client, opts ClientOptions) *http.Client {
	rt := base.Transport
	if opts.MaxResponseBytes > 0 {
		rt = boundedBodies{next: rt, max: opts.MaxResponseBytes}
	}
	if opts.RateLimiter != nil {
		rt = newPacedTransport(rt, opts.RateLimiter, opts.Use)
	}
	if opts.OnDenied != nil {
		rt = deniedTransport{next: rt, denied: opts.OnDenied}
	}
	return &http.Client{Transport: rt, Timeout: opts.Timeout, CheckRedirect: egress.NoRedirects}
}

// deniedTransport tells its owner about every 401 and 403 a client receives.
type deniedTransport struct {
	next   http.RoundTripper
	denied func()
}

func (d deniedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusUnauthorized ||
		resp.StatusCode == http.StatusForbidden && req.Context().Value(optionalPermissionKey{}) == nil) {
		d.denied()
	}
	return resp, err
}

type optionalPermissionKey struct{}

// optionalPermission marks requests that need a permission the gateway
// does without (listing ResourceQuotas): their 403 says nothing about lost
// permissions, so it does not call OnDenied (a 401 still does).
func optionalPermission(ctx context.Context) context.Context {
	return context.WithValue(ctx, optionalPermissionKey{}, true)
}

// WrappedRoundTripper lets client-go and connection tracking find the
// transport beneath.
func (d deniedTransport) WrappedRoundTripper() http.RoundTripper { return d.next }
