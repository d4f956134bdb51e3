// Package auth owns who may call the gateway's API: principals (subject,
// roles, environment scope), the ways a caller proves who it is (OIDC bearer
// JWTs verified with go-oidc against a rate-limited key set, static tokens
// from a hashed token file, DCM callers from trusted networks, or the loud
// "disabled" mode), and the audit trail of what principals did (the
// audit_events table). It decides identity only; which roles an operation
// needs is declared in the OpenAPI contract and enforced by internal/api.
// It must never log, store or return a bearer token, and never trust a
// forwarded header for a caller's address.
package auth
