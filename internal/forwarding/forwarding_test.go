package forwarding

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/membership"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

func newForwarder(t *testing.T, ring *secrets.KeyRing) *Forwarder {
	t.Helper()
	return New(Options{Keys: func() *secrets.KeyRing { return ring }, Member: "replica-1", Incarnation: incarnation, Logger: slog.New(slog.DiscardHandler)})
}

// incarnation is replica-1's process in every case.
var incarnation = uuid.New()

func ring(t *testing.T, ids ...string) *secrets.KeyRing {
	t.Helper()
	r, err := secrets.NewKeyRing(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[1:] {
		if err := r.Add(id); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// uri is the request every case sends.
const uri = "/api/v1alpha1/environments/east/volumes?id=v1"

// signed is a request for uri with body, carrying an envelope f signed
// for method, signedURI and signedBody, issued at issued, to replica-1's
// process, changed by each of edits before it is signed.
func signed(t *testing.T, f *Forwarder, method, body, signedURI, signedBody string, issued time.Time, edits ...func(*Envelope)) *http.Request {
	t.Helper()
	e := Envelope{Principal: auth.Principal{Subject: "alice", Roles: []auth.Role{auth.RoleDCM}, Environments: []string{"east"}, Method: auth.MethodOIDC},
		Peer: "10.0.0.9:5555", RequestID: "req-1", Member: "replica-2", Target: "replica-1", TargetIncarnation: incarnation,
		Nonce: rand.Text(), Issued: issued, Method: method, URI: signedURI, Headers: map[string]string{"Idempotency-Key": "key-1"}}
	for _, edit := range edits {
		edit(&e)
	}
	digest := sha([]byte(signedBody))
	e.BodySHA256 = digest
	header, signature, err := f.sign(e)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, uri, strings.NewReader(body))
	r.Header.Set("Idempotency-Key", "key-1")
	r.Header.Set(EnvelopeHeader, header)
	r.Header.Set(SignatureHeader, signature)
	return r
}

// An envelope is accepted only as it was signed, with a key of the ring,
// by the replica it names, for this very request (method, URI, body,
// Idempotency-Key), recently, once, by the process it names; the caller's
// identity (roles, scope, peer) comes through whole.
func TestVerify(t *testing.T) {
	keys := ring(t, "k1", "k2")
	f := newForwarder(t, keys)
	now := time.Now()

	genuine := signed(t, f, http.MethodPost, `{"a":1}`, uri, `{"a":1}`, now)
	got, forwarded, err := f.Verify(genuine)
	if err != nil || !forwarded {
		t.Fatalf("genuine envelope: forwarded %v, %v", forwarded, err)
	}
	// Sent again (read off the wire), to the same process or after the
	// replica restarted (a new incarnation, which has seen nothing).
	if _, forwarded, err := f.Verify(genuine); !forwarded || !errors.Is(err, ErrInvalid) {
		t.Errorf("a replayed envelope: forwarded %v, %v; want refused", forwarded, err)
	}
	restarted := New(Options{Keys: func() *secrets.KeyRing { return keys }, Member: "replica-1", Incarnation: uuid.New(), Logger: slog.New(slog.DiscardHandler)})
	if _, _, err := restarted.Verify(signed(t, f, http.MethodGet, "", uri, "", now)); !errors.Is(err, ErrInvalid) {
		t.Errorf("an envelope for replica-1's previous process accepted after its restart: %v", err)
	}
	if got.Principal.Subject != "alice" || got.Principal.Environments[0] != "east" || got.Peer != "10.0.0.9:5555" || got.RequestID != "req-1" {
		t.Fatalf("envelope read as %+v", got)
	}
	if _, forwarded, err := f.Verify(httptest.NewRequest(http.MethodGet, uri, nil)); forwarded || err != nil {
		t.Fatalf("a request without an envelope: forwarded %v, %v", forwarded, err)
	}

	// A replica whose ring was rotated (k2 promoted) still accepts what one
	// signed with k1 as primary, and one with another ring refuses it.
	path := filepath.Join(t.TempDir(), "keyring.json")
	if err := keys.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	rotated, err := secrets.LoadKeyRing(path) // the same key bytes
	if err != nil {
		t.Fatal(err)
	}
	if err := rotated.Promote("k2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newForwarder(t, rotated).Verify(signed(t, f, http.MethodGet, "", uri, "", now)); err != nil {
		t.Fatalf("after a rotation: %v", err)
	}

	for name, r := range map[string]*http.Request{
		"another ring":    signed(t, newForwarder(t, ring(t, "k1")), http.MethodGet, "", uri, "", now),
		"another URI":     signed(t, f, http.MethodGet, "", "/api/v1alpha1/environments/west/volumes", "", now),
		"another body":    signed(t, f, http.MethodPost, `{"a":2}`, uri, `{"a":1}`, now),
		"stale":           signed(t, f, http.MethodGet, "", uri, "", now.Add(-time.Minute)),
		"from the future": signed(t, f, http.MethodGet, "", uri, "", now.Add(time.Minute)),
		"without a nonce": signed(t, f, http.MethodGet, "", uri, "", now, func(e *Envelope) { e.Nonce = "" }),
	} {
		if _, forwarded, err := f.Verify(r); !forwarded || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: forwarded %v, %v; want refused", name, forwarded, err)
		}
	}
	otherKey := signed(t, f, http.MethodPost, "", uri, "", now)
	otherKey.Header.Set("Idempotency-Key", "key-2")
	if _, _, err := f.Verify(otherKey); !errors.Is(err, ErrInvalid) {
		t.Errorf("another Idempotency-Key: %v", err)
	}
	elsewhere := New(Options{Keys: func() *secrets.KeyRing { return keys }, Member: "replica-3", Logger: slog.New(slog.DiscardHandler)})
	if _, _, err := elsewhere.Verify(signed(t, f, http.MethodGet, "", uri, "", now)); !errors.Is(err, ErrInvalid) {
		t.Errorf("an envelope for replica-1 accepted by replica-3: %v", err)
	}
	tampered := signed(t, f, http.MethodGet, "", uri, "", now)
	tampered.Header.Set(EnvelopeHeader, tampered.Header.Get(EnvelopeHeader)+"x")
	if _, _, err := f.Verify(tampered); !errors.Is(err, ErrInvalid) {
		t.Errorf("a tampered envelope: %v", err)
	}
	unsigned := httptest.NewRequest(http.MethodGet, uri, nil)
	unsigned.Header.Set(EnvelopeHeader, "e30")
	if _, forwarded, err := f.Verify(unsigned); !forwarded || !errors.Is(err, ErrInvalid) {
		t.Errorf("an unsigned envelope: forwarded %v, %v", forwarded, err)
	}
}

// A stale envelope is refused as stale (the API answers 503, not 401).
func TestAStaleEnvelopeIsStale(t *testing.T) {
	f := newForwarder(t, ring(t, "k1"))
	for name, issued := range map[string]time.Time{"stale": time.Now().Add(-time.Minute), "from the future": time.Now().Add(time.Minute)} {
		if _, _, err := f.Verify(signed(t, f, http.MethodGet, "", uri, "", issued)); !errors.Is(err, ErrStale) {
			t.Errorf("%s: %v, want ErrStale", name, err)
		}
	}
	if _, _, err := f.Verify(signed(t, f, http.MethodGet, "", "/elsewhere", "", time.Now())); errors.Is(err, ErrStale) || !errors.Is(err, ErrInvalid) {
		t.Errorf("an envelope for another request: %v, want invalid, not stale", err)
	}
}

// staticOwner owns every environment, at url.
type staticOwner struct{ url string }

func (o staticOwner) Owner(context.Context, string) (membership.Peer, error) {
	return membership.Peer{ID: "replica-2", AdvertiseURL: o.url, Incarnation: uuid.New()}, nil
}

// An owner that accepts the connection and never answers — frozen by
// SIGSTOP, a GC pause — gives the caller 503 with Retry-After within the
// deadline, and nothing is written.
func TestAFrozenOwnerIsUnavailableWithinTheDeadline(t *testing.T) {
	release := make(chan struct{})
	owner := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer owner.Close()
	defer close(release)
	keys := ring(t, "k1")
	f := New(Options{Owners: staticOwner{owner.URL}, Keys: func() *secrets.KeyRing { return keys }, Member: "replica-1",
		Incarnation: incarnation, Logger: slog.New(slog.DiscardHandler), Timeout: 500 * time.Millisecond})
	rec := httptest.NewRecorder()
	start := time.Now()
	err := f.Forward(rec, httptest.NewRequest(http.MethodDelete, uri, nil), "east", Envelope{RequestID: "req-1"}, nil)
	took := time.Since(start)
	var problem *fault.Error
	if !errors.As(err, &problem) || problem.Kind != fault.Unavailable || problem.RetryAfter <= 0 {
		t.Fatalf("a frozen owner: %v, want 503 with Retry-After", err)
	}
	if took > 2*time.Second {
		t.Fatalf("answered after %s, want within the 500ms deadline", took)
	}
	if rec.Body.Len() != 0 || rec.Code != http.StatusOK && rec.Code != 0 {
		t.Fatalf("wrote %d %q", rec.Code, rec.Body)
	}
}
