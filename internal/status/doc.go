// Package status owns what DCM learns about volumes: the mapping from a PVC
// (and its class and warnings) to DCM's status and message, the debounce
// that keeps flapping calm without delaying real transitions, and the
// transactional write of each transition with its CloudEvent into the
// outbox. It must not publish: the events package relays the outbox.
package status
