// Package dcm owns the gateway's place in DCM, both ways DCM dispatches:
// as the storage agent of each environment for DCM's control plane
// (agents.go: registered and heartbeated in its agent API, carrying out
// the requests it places on the environment's NATS topic through the
// volume use cases, answered on dcm.agents.responses), and the
// registration of environments as storage providers with DCM's
// service-provider-manager (v0.1.x), through DCM's official client: asynchronous, retried with capped backoff, renewed periodically,
// and recorded in each environment's status (the dcm_registration column,
// written through the registry, fenced by the owner's lease). Each
// environment is registered by the replica that owns it; the registrar
// subscribes to the registry's changes (register, deregister), the
// ownership's (a hand-over) and the pool's (a cluster's capacity became
// known).
// It must never block startup or an API request on DCM.
package dcm
