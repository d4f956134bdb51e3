// Package api owns the HTTP surface: the OpenAPI contract (openapi.yaml), the
// echo strict server generated from it, the guard that enforces what the
// contract declares for each operation (authentication, roles, environment
// scope, admin write limits, body bounds, request validation, audit), thin
// handlers that decode, call a use case and encode, and the single place
// where errors become RFC 9457 problem+json. It must not hold business rules
// or talk to clusters directly; who a caller is, is internal/auth's to say.
package api
