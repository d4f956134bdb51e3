package kubeconfig

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// forbidden lists kubeconfig keys the gateway refuses wherever they appear,
// with the reason given, so users learn why rather than just "unknown key".
//
//nolint:gosec // G101 false positive: key names mapped to reasons, no credentials.
var forbidden = map[string]string{
	"exec":                  "exec plugins are not accepted (they run commands)",
	"auth-provider":         "auth provider plugins are not accepted (they run code and fetch tokens over the network)",
	"tokenFile":             "token files are not accepted (no file paths; use token)",
	"username":              "basic auth is not accepted",
	"password":              "basic auth is not accepted",
	"as":                    "impersonation is not accepted",
	"as-uid":                "impersonation is not accepted",
	"as-groups":             "impersonation is not accepted",
	"as-user-extra":         "impersonation is not accepted",
	"extensions":            "extensions are not accepted",
	"certificate-authority": "file paths are not accepted; use certificate-authority-data",
	"client-certificate":    "file paths are not accepted; use client-certificate-data",
	"client-key":            "file paths are not accepted; use client-key-data",
	"proxy-url":             "proxies are not accepted (the gateway connects to clusters directly)",
}

// list describes one of the named lists of a kubeconfig: the key holding each
// entry's settings and the settings allowed there, by type.
type list struct {
	key     string
	item    string
	strings []string
	bools   []string
}

var (
	topLevelKeys = []string{"apiVersion", "kind", "clusters", "users", "contexts", "current-context", "preferences"}
	clusterList  = list{
		key: "clusters", item: "cluster",
		strings: []string{"server", "certificate-authority-data", "tls-server-name"},
		bools:   []string{"insecure-skip-tls-verify", "disable-compression"},
	}
	userList    = list{key: "users", item: "user", strings: []string{"token", "client-certificate-data", "client-key-data"}}
	contextList = list{key: "contexts", item: "context", strings: []string{"cluster", "user", "namespace"}}
)

// vocabulary holds every key this package knows; only these, and short plain
// unknown keys, are spelled out in error fields.
var vocabulary = func() map[string]struct{} {
	words := slices.Concat(topLevelKeys, []string{"name", "<<"})
	for _, l := range []list{clusterList, userList, contextList} {
		words = slices.Concat(words, []string{l.item}, l.strings, l.bools)
	}
	for key := range forbidden {
		words = append(words, key)
	}
	set := make(map[string]struct{}, len(words))
	for _, w := range words {
		set[w] = struct{}{}
	}
	return set
}()

// document is the allow-listed content of a kubeconfig.
type document struct {
	clusters       []entry
	users          []entry
	contexts       []entry
	currentContext string
}

// entry is one named cluster, user or context with type-checked settings.
type entry struct {
	name    string
	path    string // path of the settings mapping, e.g. "clusters[0].cluster"
	strings map[string]string
	bools   map[string]bool
}

// field returns the error path of one of the entry's settings.
func (e entry) field(key string) string {
	return e.path + "." + key
}

// readDocument checks the root mapping against the allow-list and reads the
// three named lists.
func readDocument(root *yaml.Node) (document, error) {
	top, err := mappingValues(root, "", topLevelKeys)
	if err != nil {
		return document{}, err
	}
	if err := expect(top, "apiVersion", "v1"); err != nil {
		return document{}, err
	}
	if err := expect(top, "kind", "Config"); err != nil {
		return document{}, err
	}
	if _, err := mappingValues(top["preferences"], "preferences", nil); err != nil {
		return document{}, err
	}
	var doc document
	if doc.currentContext, err = scalar(top, "", "current-context"); err != nil {
		return document{}, err
	}
	lists := []struct {
		list
		dst *[]entry
	}{{clusterList, &doc.clusters}, {userList, &doc.users}, {contextList, &doc.contexts}}
	for _, l := range lists {
		if *l.dst, err = readList(top[l.key], l.list); err != nil {
			return document{}, err
		}
	}
	return doc, nil
}

// expect checks an optional top-level string that has one valid value.
func expect(top map[string]*yaml.Node, key, want string) error {
	got, err := scalar(top, "", key)
	if err == nil && got != "" && got != want {
		err = fieldErr(key, "must be "+want)
	}
	return err
}

// readList reads a named list, rejecting unnamed entries and duplicate names
// because a reference to an ambiguous name could select either entry.
func readList(n *yaml.Node, l list) ([]entry, error) {
	if n == nil {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fieldErr(l.key, "must be a list")
	}
	entries := make([]entry, 0, len(n.Content))
	names := make(map[string]bool, len(n.Content))
	for i, item := range n.Content {
		prefix := fmt.Sprintf("%s[%d]", l.key, i)
		e, err := readEntry(item, prefix, l)
		if err != nil {
			return nil, err
		}
		if names[e.name] {
			return nil, fieldErr(prefix+".name", "duplicate name")
		}
		names[e.name] = true
		entries = append(entries, e)
	}
	return entries, nil
}

// readEntry reads one list item: its name and its type-checked settings.
func readEntry(item *yaml.Node, prefix string, l list) (entry, error) {
	values, err := mappingValues(item, prefix, []string{"name", l.item})
	if err != nil {
		return entry{}, err
	}
	e := entry{path: prefix + "." + l.item, strings: map[string]string{}, bools: map[string]bool{}}
	if e.name, err = scalar(values, prefix, "name"); err != nil {
		return entry{}, err
	}
	if reason := checkName(e.name); reason != "" {
		return entry{}, fieldErr(prefix+".name", reason)
	}
	settings, err := mappingValues(values[l.item], e.path, slices.Concat(l.strings, l.bools))
	if err != nil {
		return entry{}, err
	}
	for _, key := range l.strings {
		if e.strings[key], err = scalar(settings, e.path, key); err != nil {
			return entry{}, err
		}
	}
	for _, key := range l.bools {
		if e.bools[key], err = boolean(settings, e.path, key); err != nil {
			return entry{}, err
		}
	}
	return e, nil
}

// checkName returns why a cluster, user or context name is unusable, or "".
// Names are returned to callers and may be logged, so they are kept short and
// printable.
func checkName(name string) string {
	switch {
	case name == "":
		return "required"
	case len(name) > 253 || !utf8.ValidString(name) || strings.ContainsFunc(name, notPrintable):
		return "must be at most 253 printable characters"
	}
	return ""
}

func notPrintable(r rune) bool {
	return !unicode.IsPrint(r)
}

// find returns the entry with the given name.
func find(entries []entry, name string) (entry, bool) {
	i := slices.IndexFunc(entries, func(e entry) bool { return e.name == name })
	if i < 0 {
		return entry{}, false
	}
	return entries[i], true
}

// mappingValues returns the non-null values of mapping n by key. Forbidden
// keys are rejected with their specific reason and any key not in allowed as
// unknown; null or absent mappings are empty. Explicit nulls count as absent.
func mappingValues(n *yaml.Node, path string, allowed []string) (map[string]*yaml.Node, error) {
	values := map[string]*yaml.Node{}
	if n == nil || isNull(n) {
		return values, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fieldErr(path, "must be a mapping")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i].Value, n.Content[i+1]
		if reason, bad := forbidden[key]; bad {
			return nil, fieldErr(join(path, key), reason)
		}
		if !slices.Contains(allowed, key) {
			return nil, fieldErr(join(path, key), "unknown key (not supported by the gateway)")
		}
		if !isNull(value) {
			values[key] = value
		}
	}
	return values, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// scalar returns the text of an optional scalar setting; "" when absent.
func scalar(values map[string]*yaml.Node, path, key string) (string, error) {
	n, ok := values[key]
	if !ok {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", fieldErr(join(path, key), "must be a string")
	}
	return n.Value, nil
}

// boolean returns an optional boolean setting; false when absent. Quoted
// strings such as "true" are rejected, as Kubernetes' own decoder does.
func boolean(values map[string]*yaml.Node, path, key string) (bool, error) {
	n, ok := values[key]
	if !ok {
		return false, nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, fieldErr(join(path, key), "must be true or false")
	}
	return strings.EqualFold(n.Value, "true"), nil
}
