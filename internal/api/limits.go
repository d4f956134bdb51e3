package api

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiterIdle is how long a principal's limiter is kept without use; a
// principal returning later starts with a full burst, which is what an idle
// limiter would hold anyway.
const limiterIdle = 10 * time.Minute

// principalLimits holds one token bucket per principal for admin writes:
// one admin's script cannot starve the others, and a stolen admin token
// cannot rewrite the registry at line rate.
type principalLimits struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	limiter  *rate.Limiter
	lastUsed time.Time
}

// newPrincipalLimits allows perSecond per principal with burst; zero
// settings (tests that do not care) are the production defaults.
func newPrincipalLimits(perSecond float64, burst int) *principalLimits {
	if perSecond <= 0 {
		perSecond, burst = 5, 20
	}
	return &principalLimits{limit: rate.Limit(perSecond), burst: max(burst, 1), buckets: map[string]*bucket{}}
}

// allowNow reports whether key may go ahead now.
func (l *principalLimits) allowNow(key string) bool {
	_, ok := l.allow(key)
	return ok
}

// allow takes a token for subject now, or says how long until one is free.
func (l *principalLimits) allow(subject string) (time.Duration, bool) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > limiterIdle {
		for s, b := range l.buckets {
			if now.Sub(b.lastUsed) > limiterIdle {
				delete(l.buckets, s)
			}
		}
		l.lastSweep = now
	}
	b := l.buckets[subject]
	if b == nil {
		b = &bucket{limiter: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[subject] = b
	}
	b.lastUsed = now
	r := b.limiter.ReserveN(now, 1)
	if delay := r.DelayFrom(now); delay > 0 {
		r.CancelAt(now)
		return delay, false
	}
	return 0, true
}
