// Package changes carries change notices from the part that owns some state
// (the cluster pool owns connections and their health, the registry owns
// environments) to the parts that react to it (the fleet feed, the DCM
// registrar, the volume reconciler, the registry's connector). It owns no
// table and no state of its own.
//
// A publisher never waits for a subscriber: each subscription has its own
// queue, filled by Publish under a short lock and drained on the
// subscriber's goroutine, so a subscriber's database write can never stall a
// cluster's health check or an informer. Notices are level-triggered: a
// notice says what changed (an environment id and a kind), the subscriber
// reads the current state, and a notice equal to one still waiting in the
// queue is merged with it (client-go's work queue), so a burst costs one
// reaction.
package changes
