// Package status owns the mapping from a PVC and what the cluster says about
// it to the status DCM sees (PROVISIONING, RUNNING, FAILED, DELETING,
// DELETED) with a human message. It is pure: it reads objects handed to it
// and never calls a cluster or a database.
package status
