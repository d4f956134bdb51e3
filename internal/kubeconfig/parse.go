package kubeconfig

import "encoding/base64"

// MaxSize is the largest kubeconfig Parse accepts. Real kubeconfigs for one
// cluster are a few KiB; the bound keeps parsing cheap for hostile input.
const MaxSize = 64 << 10

// Options controls Parse.
type Options struct {
	Context       string // context to select; "" = current-context, or the only context
	AllowInsecure bool   // operator setting SG_ALLOW_INSECURE_CLUSTERS
}

// Parsed is a selected context's connection plus the namespace it names (may be "").
type Parsed struct {
	Connection Connection
	Context    string
	Namespace  string
}

// Parse reads an untrusted kubeconfig and returns the connection of the
// selected context. It never reads files, runs commands or dials: anything in
// the document that would need to is rejected. Errors are *FieldError with
// paths relative to the document.
func Parse(data []byte, opts Options) (Parsed, error) {
	doc, err := readKubeconfig(data)
	if err != nil {
		return Parsed{}, err
	}
	ctx, err := doc.selectContext(opts.Context)
	if err != nil {
		return Parsed{}, err
	}
	conn, err := doc.connection(ctx, opts.AllowInsecure)
	if err != nil {
		return Parsed{}, err
	}
	namespace := ctx.strings["namespace"]
	if namespace != "" && !dnsLabel.MatchString(namespace) {
		return Parsed{}, fieldErr(ctx.field("namespace"), "must be a DNS-1123 label")
	}
	return Parsed{Connection: conn, Context: ctx.name, Namespace: namespace}, nil
}

// readKubeconfig applies the size bound, the YAML rules and the allow-list.
func readKubeconfig(data []byte) (document, error) {
	if len(data) > MaxSize {
		return document{}, fieldErr("", "larger than 64 KiB")
	}
	root, err := decodeYAML(data)
	if err != nil {
		return document{}, err
	}
	if err := checkNode(root, ""); err != nil {
		return document{}, err
	}
	return readDocument(root)
}

// selectContext picks the requested context, else current-context, else the
// only context. It never guesses between several.
func (d document) selectContext(name string) (entry, error) {
	switch {
	case name != "":
		if ctx, ok := find(d.contexts, name); ok {
			return ctx, nil
		}
		return entry{}, fieldErr("contexts", "no context has the requested name")
	case d.currentContext != "":
		if ctx, ok := find(d.contexts, d.currentContext); ok {
			return ctx, nil
		}
		return entry{}, fieldErr("current-context", "names a context that does not exist")
	case len(d.contexts) == 1:
		return d.contexts[0], nil
	case len(d.contexts) == 0:
		return entry{}, fieldErr("contexts", "at least one context is required")
	}
	return entry{}, fieldErr("current-context", "several contexts; select one")
}

// connection builds and validates the Connection of the selected context.
func (d document) connection(ctx entry, allowInsecure bool) (Connection, error) {
	cluster, err := reference(ctx, "cluster", d.clusters)
	if err != nil {
		return Connection{}, err
	}
	user, err := reference(ctx, "user", d.users)
	if err != nil {
		return Connection{}, err
	}
	conn := Connection{
		Server:        cluster.strings["server"],
		TLSServerName: cluster.strings["tls-server-name"],
		Insecure:      cluster.bools["insecure-skip-tls-verify"],
		Token:         user.strings["token"],
	}
	data := []struct {
		from entry
		key  string
		dst  *[]byte
	}{
		{cluster, "certificate-authority-data", &conn.CAData},
		{user, "client-certificate-data", &conn.ClientCertData},
		{user, "client-key-data", &conn.ClientKeyData},
	}
	for _, field := range data {
		if *field.dst, err = decodeData(field.from, field.key); err != nil {
			return Connection{}, err
		}
	}
	return conn.normalized(allowInsecure, kubeconfigFields(cluster, user))
}

// reference resolves the context's cluster or user by name.
func reference(ctx entry, key string, entries []entry) (entry, error) {
	name := ctx.strings[key]
	if name == "" {
		return entry{}, fieldErr(ctx.field(key), "required")
	}
	e, ok := find(entries, name)
	if !ok {
		return entry{}, fieldErr(ctx.field(key), "names a "+key+" that does not exist")
	}
	return e, nil
}

// decodeData decodes a base64 "*-data" setting; nil when absent.
func decodeData(e entry, key string) ([]byte, error) {
	text := e.strings[key]
	if text == "" {
		return nil, nil
	}
	data, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return nil, fieldErr(e.field(key), "must be base64 (standard encoding) of PEM data")
	}
	return data, nil
}

// kubeconfigFields names Connection fields by their kubeconfig paths.
func kubeconfigFields(cluster, user entry) fieldNames {
	return fieldNames{
		server:        cluster.field("server"),
		ca:            cluster.field("certificate-authority-data"),
		tlsServerName: cluster.field("tls-server-name"),
		insecure:      cluster.field("insecure-skip-tls-verify"),
		token:         user.field("token"),
		cert:          user.field("client-certificate-data"),
		key:           user.field("client-key-data"),
		credentials:   user.path,
	}
}
