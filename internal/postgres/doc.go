// Package postgres owns the gateway's connection to Postgres: the pgx/v5 pool,
// the embedded schema migrations (goose) and database bootstrap for local runs.
// It knows nothing about the domain tables; use-case packages own their queries.
package postgres
