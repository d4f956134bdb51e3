// Package egress owns the gateway's outbound-connection policy towards
// Kubernetes API servers (which resolved addresses may be dialled, and that
// HTTP redirects are never followed); it must not parse kubeconfigs, hold
// credentials or build cluster clients.
//
// Cluster server URLs come from admins, so without this package the gateway
// would be an SSRF vector: a kubeconfig could point it at a cloud metadata
// service, at the gateway's own loopback listeners or at hosts on an internal
// network. The check runs in [net.Dialer.ControlContext], on the address the
// socket is about to connect to, after DNS resolution and for every address
// Happy Eyeballs tries, so DNS rebinding cannot slip past it.
//
// Addresses fall into three classes:
//
//   - Always refused, whatever the allow-list says: invalid and unspecified
//     addresses (0.0.0.0 and :: mean "this host" to connect(2)), 0.0.0.0/8,
//     the IPv4 broadcast address, multicast, link-local (169.254.0.0/16,
//     fe80::/10) and the cloud metadata endpoints 169.254.169.254 (AWS, GCP,
//     Azure, OCI), fd00:ec2::254 (AWS IPv6), 100.100.100.200 (Alibaba) and
//     168.63.129.16 (Azure wireserver). No API server legitimately lives
//     there, and the metadata endpoints hand out cloud credentials.
//   - Restricted, refused unless inside Policy.Allowed: loopback, RFC 1918,
//     unique local fc00::/7, carrier-grade NAT 100.64.0.0/10, and the other
//     special-purpose ranges that are not globally reachable: IETF protocol
//     assignments 192.0.0.0/24, documentation and benchmarking ranges,
//     reserved 240.0.0.0/4, deprecated site-local fec0::/10, and any IPv6
//     address outside global unicast 2000::/3. On-prem clusters live in some
//     of these, so an operator may open them explicitly.
//   - Allowed: everything else, i.e. public unicast.
//
// Before classification, zones are stripped, IPv4-mapped IPv6 addresses
// (::ffff:a.b.c.d) are unmapped and well-known-prefix NAT64 addresses
// (64:ff9b::a.b.c.d) are judged as the IPv4 address they translate to, so
// none of these spellings reaches an address its IPv4 form could not. 6to4
// and Teredo addresses are not decoded: both are deprecated and need relays a
// gateway host will not have.
//
// A transport using [Policy.DialContext] must not also use an HTTP proxy: the
// check would then apply to the proxy's address, not the cluster's.
package egress
