// Package forwarding owns how one replica hands a request to another: a
// request for an environment that another replica owns (the only one
// connected to its cluster) is proxied to that replica's SG_ADVERTISE_URL,
// carrying the caller's identity in a signed envelope instead of the
// caller's token, so the owner authorizes and audits the original caller
// (subject, roles, scope, peer, request id). The envelope is signed with
// HMAC-SHA256 under a key derived from the shared key ring (every replica
// has it already to open cluster credentials), binds the target replica's
// process, the method, the URI, the body's digest and the time, and is
// accepted once, for a short while only.
// A forwarded request is never forwarded again: if its receiver does not own
// the environment either (a hand-over in between), it answers 503 with
// Retry-After. It owns no table and must not decide who owns what
// (internal/membership does).
package forwarding
