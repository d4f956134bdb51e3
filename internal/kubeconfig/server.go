package kubeconfig

import (
	"errors"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// dnsLabel is an RFC 1123 label in lowercase, as Kubernetes namespaces are.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// normalizeServer validates a cluster's API server URL and returns it as
// "https://host[:port]". Only plain HTTPS to a host is accepted: user info
// would be a second credential channel, and paths, queries or fragments would
// let one kubeconfig point the gateway at something other than an API root.
func normalizeServer(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("required")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", errors.New("must be a valid URL")
	case u.Scheme != "https" || !strings.HasPrefix(raw, "https://"):
		return "", errors.New("must use the https scheme")
	case u.User != nil:
		return "", errors.New("must not contain user info")
	case u.RawQuery != "" || u.ForceQuery:
		return "", errors.New("must not have a query")
	case strings.Contains(raw, "#"):
		return "", errors.New("must not have a fragment")
	case u.EscapedPath() != "" && u.EscapedPath() != "/":
		return "", errors.New("must not have a path")
	}
	host, err := normalizeHost(u)
	if err != nil {
		return "", err
	}
	return "https://" + host, nil
}

// normalizeHost returns u's host in lowercase, IPv6 in brackets, with the port
// in canonical form when one is given.
func normalizeHost(u *url.URL) (string, error) {
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", errors.New("must have a host")
	}
	ip, err := netip.ParseAddr(host)
	isIPv6 := err == nil && ip.Is6()
	if !validHost(host) || isIPv6 != strings.HasPrefix(u.Host, "[") {
		return "", errors.New("host must be a DNS name, an IPv4 address or a bracketed IPv6 address")
	}
	if isIPv6 {
		host = "[" + host + "]"
	}
	if u.Port() == "" {
		return host, nil
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return "", errors.New("port must be between 1 and 65535")
	}
	return host + ":" + strconv.Itoa(port), nil
}

// validHost reports whether s is an IP address without zone or a DNS name.
func validHost(s string) bool {
	if ip, err := netip.ParseAddr(s); err == nil {
		return ip.Zone() == ""
	}
	return isDNSName(s)
}

// isDNSName reports whether s is a DNS name of at most 253 characters. An
// all-numeric last label is refused so malformed IPv4 addresses such as
// "999.1.1.1" are not taken for names.
func isDNSName(s string) bool {
	if len(s) > 253 {
		return false
	}
	labels := strings.Split(strings.ToLower(s), ".")
	for _, label := range labels {
		if !dnsLabel.MatchString(label) {
			return false
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}
