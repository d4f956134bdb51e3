// Package capabilities owns what the gateway knows about a StorageClass's
// supported access and volume modes and where that knowledge comes from. It
// must never guess: a mode it cannot know is reported as unknown, and callers
// accept what is unknown.
package capabilities
