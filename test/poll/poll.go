// Package poll waits, in tests, for a condition that a real component (a
// cluster, a process, the database, a server) makes true in its own time:
// one helper on apimachinery's wait package instead of a sleep loop in every
// test. Logic that only depends on time is tested with testing/synctest
// instead. It must never be imported by production code.
package poll

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// interval is how often a condition is checked.
const interval = 50 * time.Millisecond

// Until checks cond at once and then every 50 ms until it holds, and
// returns how long that took; the test fails, naming what, if it does not
// hold within the given time.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return UntilEvery(t, interval, within, what, cond)
}

// UntilEvery is Until checking every given interval: for a condition whose
// check costs what it measures a share of (reading a whole fleet from the
// processes under test), which a check every 50 ms would slow down.
func UntilEvery(t testing.TB, every, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	valueEvery(t, every, within, func() (string, bool) { return what, cond() })
	return time.Since(start)
}

// Value calls f at once and then every 50 ms until it reports done, and
// returns its value then; the test fails with the last value if f is not
// done within the given time.
func Value[T any](t testing.TB, within time.Duration, f func() (T, bool)) T {
	t.Helper()
	return valueEvery(t, interval, within, f)
}

// valueEvery is Value calling f every given interval.
func valueEvery[T any](t testing.TB, every, within time.Duration, f func() (T, bool)) T {
	t.Helper()
	var last T
	err := wait.PollUntilContextTimeout(context.Background(), every, within, true, func(context.Context) (bool, error) {
		var done bool
		last, done = f()
		return done, nil
	})
	if err != nil {
		t.Fatalf("not within %s: %v", within, last)
	}
	return last
}

// Never checks cond every 50 ms for the given time and fails the test,
// naming what, as soon as it holds: for what must not happen (a retry, a
// late write, one more watch), which only time can show, without a sleep
// that looks once at the end.
func Never(t testing.TB, during time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), interval, during, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err == nil {
		t.Fatalf("within %s: %s", during, what)
	}
}
