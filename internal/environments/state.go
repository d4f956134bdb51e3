package environments

import "github.com/dcm-project/storage-gateway/internal/clusters"

// State is an environment's state (the API contract's EnvironmentState):
// what its last probe found, moved between UNREACHABLE and READY by what
// its owner's connection learns in between (RecordHealth).
type State string

// The states of an environment.
const (
	StatePending      State = "PENDING"
	StateReady        State = "READY"
	StateDegraded     State = "DEGRADED"
	StateUnreachable  State = "UNREACHABLE"
	StateUnauthorized State = "UNAUTHORIZED"
)

// stateOf is the state an environment takes from its cluster's health.
func stateOf(h clusters.HealthState) State { return State(h) }
