// Package api owns the HTTP surface: the OpenAPI contract (openapi.yaml), the
// echo strict server generated from it, thin handlers that decode, call a use
// case and encode, and the single place where errors become RFC 9457
// problem+json. It must not hold business rules or talk to clusters directly.
package api
