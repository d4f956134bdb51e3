package environments

import "context"

// WatchReads returns one read of the registry's watch at a time, as its
// Watch loop makes them (the first learns the rows).
func (s *Service) WatchReads() func(ctx context.Context) ([]Change, error) {
	w := watch{repo: s.repo, registered: &s.registered}
	return w.read
}
