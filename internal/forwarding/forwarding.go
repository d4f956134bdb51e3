package forwarding

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// The headers a forwarded request carries: the envelope (base64url JSON)
// and its signature (base64url HMAC-SHA256 of the header's value).
const (
	EnvelopeHeader  = "Storage-Gateway-Forwarded"
	SignatureHeader = "Storage-Gateway-Forwarded-Signature"
)

// keyPurpose names what the derived key is for (secrets.DeriveKeys).
const keyPurpose = "storage-gateway request forwarding v1"

// maxAge bounds how old (or how far ahead, between clocks) an envelope may
// be: a forwarded request is sent at once, so this only has to cover clock
// skew between replicas and a slow network.
const maxAge = 30 * time.Second

// maxBody bounds the body of a forwarded request: more than any operation
// accepts (the API's own limits apply after).
const maxBody = 1 << 20

// Forwarding deadlines. An owner that is frozen (SIGSTOP, a long GC pause,
// a partition) accepts connections in its kernel and never answers: without
// a deadline the caller waits until it gives up, and the owner, when it
// wakes, refuses the envelope as stale. So a forward connects within
// dialTimeout and is answered within DefaultTimeout, or the caller hears
// 503 with Retry-After well inside DCM's own client timeout; the owner's
// cluster writes have a shorter deadline of their own, so a live owner
// answers first.
const (
	dialTimeout    = 2 * time.Second
	DefaultTimeout = 15 * time.Second
)

// Envelope is what a forwarded request says about its caller and itself.
type Envelope struct {
	Principal auth.Principal `json:"principal"`
	// Peer is the caller's address as the first replica saw it.
	Peer      string `json:"peer"`
	RequestID string `json:"request_id"`
	// Member is the replica that forwarded it, Target the one it is for
	// and TargetIncarnation the process it is for (a restart is another):
	// no other replica, and no later process of the same one, accepts it.
	Member            string    `json:"member"`
	Target            string    `json:"target"`
	TargetIncarnation uuid.UUID `json:"target_incarnation"`
	// Nonce makes each envelope unique: its receiver accepts it once.
	Nonce  string    `json:"nonce"`
	Issued time.Time `json:"issued"`
	Method string    `json:"method"`
	URI    string    `json:"uri"`
	// Headers are the request headers that change what an operation does
	// (signedHeaders), as sent.
	Headers map[string]string `json:"headers,omitempty"`
	// BodySHA256 is the digest of the body sent with it.
	BodySHA256 []byte `json:"body_sha256"`
}

// signedHeaders change what an operation does: the envelope binds them, so
// a replayed envelope cannot carry other values.
var signedHeaders = []string{"Content-Type", "Idempotency-Key"}

// headersOf returns r's signed headers that are set.
func headersOf(r *http.Request) map[string]string {
	out := map[string]string{}
	for _, h := range signedHeaders {
		if v := r.Header.Get(h); v != "" {
			out[h] = v
		}
	}
	return out
}

// Owners says who owns an environment and where it is reached (a
// membership.Membership).
type Owners interface {
	Owner(ctx context.Context, env string) (membership.Peer, error)
}

// Options configure a Forwarder.
type Options struct {
	Owners Owners
	// Keys returns the key ring in use now (it is reloaded on SIGHUP).
	Keys func() *secrets.KeyRing
	// Member is this replica's member id, recorded in what it forwards,
	// and Incarnation this process's (membership.Membership.Incarnation):
	// it accepts only envelopes for both.
	Member      string
	Incarnation uuid.UUID
	Logger      *slog.Logger
	// Transport carries forwarded requests (default: one of its own, with
	// the dial and header deadlines).
	Transport http.RoundTripper
	// Timeout bounds a whole forward (default DefaultTimeout).
	Timeout time.Duration
	// Now is the clock envelopes are issued and checked by (tests move
	// it); default time.Now.
	Now func() time.Time
}

// Forwarder forwards requests to their environment's owner and verifies
// what other replicas forward.
type Forwarder struct {
	opts Options
	seen *seen
}

// New returns a Forwarder.
func New(opts Options) *Forwarder {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Transport == nil {
		opts.Transport = &http.Transport{
			Proxy:                 nil, // replicas talk directly: an envelope never passes through a proxy
			DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: opts.Timeout,
			ExpectContinueTimeout: time.Second,
		}
	}
	return &Forwarder{opts: opts, seen: newSeen()}
}

// ErrInvalid says a request carried a forwarding envelope that is not
// genuine, not current, or not for this request.
var ErrInvalid = errors.New("forwarded request not accepted")

// ErrStale says a genuine envelope arrived after its time: the forwarding
// replica's deadline has passed (this replica was frozen, or the clocks are
// apart), so whoever sent it has answered its caller already. The caller's
// retry is the request to serve.
var ErrStale = fmt.Errorf("%w: the envelope is out of date", ErrInvalid)

// Forward proxies r, whose body is body, for env to the replica that owns
// it, on behalf of e's caller, and writes the owner's answer to w. An
// environment without a reachable owner is an error (503 with Retry-After
// while it is handed over) and nothing is written.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, env string, e Envelope, body []byte) error {
	owner, err := f.opts.Owners.Owner(r.Context(), env)
	if _, classified := fault.As(err); err != nil && !classified {
		f.opts.Logger.WarnContext(r.Context(), "find the environment's owner", "environment", env, "error", err)
		return fault.RetryLater(time.Second, "cannot tell which replica serves environment %s now; retry shortly", env)
	}
	if err != nil {
		return err
	}
	member := owner.ID
	if owner.AdvertiseURL == "" {
		return fault.New(fault.Unavailable, "environment %s is owned by replica %s, which has no SG_ADVERTISE_URL to forward to", env, member)
	}
	target, err := url.Parse(owner.AdvertiseURL)
	if err != nil {
		return fault.New(fault.Unavailable, "replica %s advertises an unusable address", member)
	}
	e.Member, e.Target, e.TargetIncarnation, e.Nonce = f.opts.Member, member, owner.Incarnation, rand.Text()
	e.Issued, e.Method, e.URI, e.Headers, e.BodySHA256 = f.opts.Now().UTC(), r.Method, r.URL.RequestURI(), headersOf(r), sha(body)
	header, signature, err := f.sign(e)
	if err != nil {
		return err
	}
	var failed error
	proxy := &httputil.ReverseProxy{
		Transport: f.opts.Transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path, pr.Out.URL.RawPath = r.URL.Path, r.URL.RawPath
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.Out.Host = target.Host
			// The owner trusts the envelope, not the caller's token: the
			// token stays with the replica that checked it.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Set(EnvelopeHeader, header)
			pr.Out.Header.Set(SignatureHeader, signature)
			// Both replicas log the request under one id.
			pr.Out.Header.Set("X-Request-Id", e.RequestID)
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
		},
		// The headers this replica set already (request id, security
		// headers) are the owner's too: keep one copy of each.
		ModifyResponse: func(resp *http.Response) error {
			for name := range w.Header() {
				resp.Header.Del(name)
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) { failed = err },
		ErrorLog:     slog.NewLogLogger(f.opts.Logger.Handler(), slog.LevelWarn),
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.opts.Timeout)
	defer cancel()
	proxy.ServeHTTP(w, r.WithContext(ctx))
	if failed != nil {
		f.opts.Logger.WarnContext(r.Context(), "forward a request to the environment's owner", "environment", env, "member", member, "error", failed)
		return fault.RetryLater(time.Second, "environment %s is served by replica %s, which did not answer; retry shortly", env, member)
	}
	return nil
}

// sign encodes e and signs it with the primary derived key.
func (f *Forwarder) sign(e Envelope) (header, signature string, err error) {
	keys, err := f.opts.Keys().DeriveKeys(keyPurpose)
	if err != nil {
		return "", "", err
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return "", "", err
	}
	header = base64.RawURLEncoding.EncodeToString(raw)
	return header, base64.RawURLEncoding.EncodeToString(mac(keys[0], header)), nil
}

// Verify reads the forwarding envelope r carries, if any (forwarded false
// when it carries none). An envelope is accepted only if it is signed with
// a key derived from this replica's ring, was issued within maxAge, and
// names this replica as its target and r's method, URI, signed headers and
// body (read from r, and put back), and only once: an envelope sent again
// (by whoever can read the replicas' traffic) is refused, by this process
// while it is current and by the next one of the same replica because it
// names this process's incarnation.
func (f *Forwarder) Verify(r *http.Request) (e Envelope, forwarded bool, err error) {
	header := r.Header.Get(EnvelopeHeader)
	if header == "" && r.Header.Get(SignatureHeader) == "" {
		return Envelope{}, false, nil
	}
	signature, err := base64.RawURLEncoding.DecodeString(r.Header.Get(SignatureHeader))
	if err != nil {
		return Envelope{}, true, fmt.Errorf("%w: the signature does not decode", ErrInvalid)
	}
	keys, err := f.opts.Keys().DeriveKeys(keyPurpose)
	if err != nil {
		return Envelope{}, true, err
	}
	genuine := false
	for _, key := range keys {
		genuine = genuine || hmac.Equal(signature, mac(key, header))
	}
	if !genuine {
		return Envelope{}, true, fmt.Errorf("%w: not signed with a key of this key ring", ErrInvalid)
	}
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil || json.Unmarshal(raw, &e) != nil {
		return Envelope{}, true, fmt.Errorf("%w: the envelope does not decode", ErrInvalid)
	}
	if age := f.opts.Now().Sub(e.Issued); age > maxAge || age < -maxAge {
		return Envelope{}, true, fmt.Errorf("%w: issued %s ago", ErrStale, age.Round(time.Second))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return Envelope{}, true, err
	}
	if len(body) > maxBody {
		return Envelope{}, true, fmt.Errorf("%w: the body exceeds %d bytes", ErrInvalid, maxBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if e.Target != f.opts.Member || e.TargetIncarnation != f.opts.Incarnation {
		return Envelope{}, true, fmt.Errorf("%w: the envelope is for replica %q in incarnation %s", ErrInvalid, e.Target, e.TargetIncarnation)
	}
	if e.Method != r.Method || e.URI != r.URL.RequestURI() || !hmac.Equal(e.BodySHA256, sha(body)) || !maps.Equal(e.Headers, headersOf(r)) {
		return Envelope{}, true, fmt.Errorf("%w: the envelope is for another request", ErrInvalid)
	}
	if e.Nonce == "" || !f.seen.first(e.Nonce, e.Issued.Add(maxAge)) {
		return Envelope{}, true, fmt.Errorf("%w: the envelope was accepted before", ErrInvalid)
	}
	return e, true, nil
}

func sha(body []byte) []byte {
	digest := sha256.Sum256(body)
	return digest[:]
}

func mac(key []byte, message string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(message))
	return h.Sum(nil)
}

// seen remembers the nonces of accepted envelopes until they expire (an
// expired envelope is refused by its age): the memory is bounded by the
// forwarded requests of one maxAge.
type seen struct {
	mu    sync.Mutex
	until map[string]time.Time
	swept time.Time
}

func newSeen() *seen { return &seen{until: map[string]time.Time{}} }

// first records nonce, current until expires, and reports whether it is
// new. Expired nonces are dropped once per maxAge, on the way.
func (s *seen) first(nonce string, expires time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Sub(s.swept) > maxAge {
		maps.DeleteFunc(s.until, func(_ string, t time.Time) bool { return now.After(t) })
		s.swept = now
	}
	if _, ok := s.until[nonce]; ok {
		return false
	}
	s.until[nonce] = expires
	return true
}
