// Package dcm owns the gateway's registration of environments as storage
// providers with DCM's service-provider-manager, through DCM's official
// client: asynchronous, retried with capped backoff, renewed periodically,
// and recorded in each environment's status. It must never block startup or
// an API request on DCM.
package dcm
