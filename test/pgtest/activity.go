package pgtest

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcm-project/storage-gateway/test/poll"
)

// AwaitActivity waits until a session of db's database shows the activity
// where describes (a condition on pg_stat_activity, such as "wait_event_type
// = 'Lock'"): a test that builds an interleaving of transactions goes on
// only once the statement it raced is running or waiting, not after a sleep
// that a loaded machine outlasts. The test fails, naming what, after 10 s.
func AwaitActivity(t testing.TB, db *pgxpool.Pool, what, where string) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, func() bool {
		var seen bool
		err := db.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND (`+where+`))`).Scan(&seen)
		return err == nil && seen
	})
}
