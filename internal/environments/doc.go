// Package environments owns the registry of clusters the gateway serves:
// validation of what admins register, the Postgres repository, the probe that
// gates registration and credential rotation, and key rotation of the sealed
// credentials. It must never return, log or store credentials in the clear:
// they enter as a kubeconfig or explicit credentials, are sealed by
// internal/secrets, and leave only as a kubeconfig.Connection handed to the
// cluster client.
package environments
