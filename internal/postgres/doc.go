// Package postgres owns the gateway's connection to Postgres: the pgx/v5 pool,
// the embedded schema migrations (goose) and database bootstrap for local runs.
// It knows nothing about the domain tables; use-case packages own their queries.
// It also owns how a replica follows what the others write to a table
// (ReadWritten): the rows written since its last read, found by the writing
// transaction's id, which the table's trigger stamps in written_xid. And it
// owns the group commit of the process's hot writes (Group): concurrent
// requests' statements share one round trip and one commit.
package postgres
