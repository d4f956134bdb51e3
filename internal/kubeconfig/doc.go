// Package kubeconfig owns turning an untrusted, user-supplied kubeconfig into
// the connection settings for one cluster, and it must never read a file, run a
// command or dial the network while doing so.
//
// A kubeconfig is executable configuration: exec plugins and auth providers run
// programs, file-path fields read the gateway's own disk, proxy URLs redirect
// traffic and impersonation fields widen privileges. client-go's clientcmd
// loaders honour all of that, so this package never uses them. Instead it
// decodes the YAML into a node tree, walks it against an allow-list and builds
// its own Connection from the few fields the gateway supports. Anything else is
// rejected by name rather than ignored, so a user never believes a setting took
// effect when it did not.
//
// The YAML itself is hostile too: anchors and aliases (billion-laughs bombs),
// merge keys, duplicate keys and tags are all rejected before any field is
// read, because each of them lets two readers see different documents.
//
// Structural rules (allowed keys, value types, names) apply to every entry in
// the document; value rules (server URL, certificates, credentials, namespace)
// apply to the selected context, its cluster and its user, since only those
// become a Connection.
//
// Errors are *FieldError values that name the offending field and never quote
// input: kubeconfigs carry tokens and private keys, and error messages end up
// in API responses and logs.
package kubeconfig
