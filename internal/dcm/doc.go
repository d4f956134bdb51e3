// Package dcm owns the gateway's registration of environments as storage
// providers with DCM's service-provider-manager, through DCM's official
// client: asynchronous, retried with capped backoff, renewed periodically,
// and recorded in each environment's status (the dcm_registration column,
// written through the registry). It subscribes to the registry's changes
// (register, deregister) and the pool's (a cluster's capacity became known).
// It must never block startup or an API request on DCM.
package dcm
