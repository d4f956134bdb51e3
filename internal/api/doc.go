// Package api owns the HTTP surface: the OpenAPI contract (openapi.yaml), the
// echo strict server generated from it, the guard that enforces what the
// contract declares for each operation (authentication, roles, environment
// scope, admin write limits, body bounds, request validation, audit), thin
// handlers that decode, call a use case and encode, and the single place
// where errors become RFC 9457 problem+json. It must not hold business rules
// or talk to clusters directly; who a caller is, is internal/auth's to say.
//
// Every call: request id → security headers → Host check → access log →
// guard (the contract's operation → the caller, or a forwarding envelope
// another replica signed → the operation's roles → the principal's scope →
// admin write limit → body bounds → contract validation) → handler, or,
// for an operation that needs a cluster another replica owns, forwarding
// to that owner → audit (mutations; a forwarded request is audited by the
// owner).
package api
