package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
	"github.com/dcm-project/storage-gateway/internal/config"
)

// defaultGateway is where the CLI looks for a gateway when neither --gateway
// nor SG_GATEWAY_URL says: where `make run` serves.
const defaultGateway = "http://127.0.0.1:8080"

// gatewayClient is the admin CLI's connection to a running gateway and the
// format it prints the answers in.
type gatewayClient struct {
	gateway string
	token   string
	output  string
}

// registerFlags adds the flags that say how to reach the gateway and how to
// print its answers.
func (c *gatewayClient) registerFlags(cmd *cobra.Command) {
	flags := cmd.PersistentFlags()
	flags.StringVar(&c.gateway, "gateway", envOr("SG_GATEWAY_URL", defaultGateway),
		"gateway base URL; host:port means http:// on this machine (loopback) and https:// anywhere else; SG_GATEWAY_URL sets the default")
	// The token's default is read in client(), not here: cobra prints flag
	// defaults in --help.
	flags.StringVar(&c.token, "gateway-token", "",
		"bearer token for the gateway API; when empty, SG_GATEWAY_TOKEN, then the token saved by storage-gateway login")
	flags.StringVarP(&c.output, "output", "o", "table", "output format: "+strings.Join(outputFormats, ", "))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// client checks the flags and returns an API client for the gateway.
func (c *gatewayClient) client(ctx context.Context) (*api.ClientWithResponses, error) {
	if err := checkOutput(c.output); err != nil {
		return nil, err
	}
	base, err := gatewayURL(c.gateway)
	if err != nil {
		return nil, err
	}
	c.gateway = base
	if c.token == "" {
		c.token = os.Getenv("SG_GATEWAY_TOKEN")
	}
	if c.token == "" {
		token, err := loginToken(ctx)
		if err != nil {
			return nil, err
		}
		// The login's token is an OIDC access token that DCM accepts too:
		// it is sent only over TLS, or to a gateway on this machine.
		if token != "" && !secureOrLocal(base) {
			return nil, fmt.Errorf("the saved login is sent only to an https gateway or one on loopback, not %s", base)
		}
		c.token = token
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A registration probes the cluster before it answers: allow for that,
	// but never hang on a gateway that accepted the connection and went quiet.
	transport.ResponseHeaderTimeout = 2 * time.Minute
	return api.NewClientWithResponses(base,
		api.WithHTTPClient(&http.Client{Transport: reachTransport{base: transport, gateway: base}}),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			return nil
		}))
}

// gatewayURL reads --gateway: a base URL, or host:port — http for a gateway
// on this machine (what `make run` serves), https for any other, so a bearer
// token never leaves the machine unencrypted because a scheme was left out.
func gatewayURL(raw string) (string, error) {
	withScheme := raw
	if !strings.Contains(raw, "://") {
		withScheme = "https://" + raw
		if u, err := url.Parse("http://" + raw); err == nil && secureOrLocal(u.String()) {
			withScheme = u.String()
		}
	}
	u, err := url.Parse(withScheme)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" {
		shown := fmt.Sprintf(" %q", raw)
		if strings.Contains(raw, "@") {
			shown = "" // it may carry a password
		}
		return "", fmt.Errorf("--gateway%s is not a gateway address: give its base URL (http://127.0.0.1:8080, "+
			"https://gateway.example.com) or host:port", shown)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// secureOrLocal reports whether raw is an https URL, or http on loopback.
func secureOrLocal(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && config.SecureOrLoopback(u)
}

// reachTransport marks a request the gateway did not answer, so the CLI
// can say that once, plainly.
type reachTransport struct {
	base    http.RoundTripper
	gateway string
}

func (t reachTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil && req.Context().Err() == nil {
		return nil, &unreachableError{gateway: t.gateway, err: err, sent: !notSent(err)}
	}
	return resp, err
}

// notSent reports whether err ended the request before any of it reached
// the gateway: no address, no connection, or no TLS session.
func notSent(err error) bool {
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	return errors.As(err, &opErr) && opErr.Op == "dial" || errors.As(err, &certErr) || errors.As(err, &recordErr)
}

// unreachableError is a request the gateway never answered. main prints it
// alone rather than inside the HTTP client's `Get "URL": ...` wrapping, which
// repeats the address and the resolver's own wording.
type unreachableError struct {
	gateway string
	err     error
	// sent is set when the request may have reached the gateway (the
	// connection broke, or no answer came in time): a change may have been
	// made, and the gateway is not the wrong address.
	sent bool
}

func (e *unreachableError) Error() string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	switch {
	case e.sent:
		return fmt.Sprintf("no answer from the gateway at %s (%s); the request may have been carried out: "+
			"check before repeating a change", e.gateway, e.err)
	case errors.As(e.err, &dnsErr):
		return e.wrongAddress(fmt.Sprintf("no host named %q was found", dnsErr.Name))
	case errors.Is(e.err, syscall.ECONNREFUSED):
		return e.wrongAddress("nothing is listening there (is the gateway running? `make run` starts one)")
	case errors.As(e.err, &certErr):
		return e.wrongAddress("its TLS certificate is not trusted: " + certErr.Err.Error())
	}
	var opErr *net.OpError
	if errors.As(e.err, &opErr) && opErr.Err != nil {
		return e.wrongAddress(opErr.Err.Error())
	}
	return e.wrongAddress(e.err.Error())
}

func (e *unreachableError) wrongAddress(reason string) string {
	return fmt.Sprintf("cannot reach the gateway at %s: %s; point the CLI at the gateway with --gateway URL or SG_GATEWAY_URL",
		e.gateway, reason)
}

func (e *unreachableError) Unwrap() error { return e.err }

// apiFieldAnnotation marks a flag with the request fields it sets, so a
// refusal naming such a field names the flag instead: CLI messages speak CLI.
const apiFieldAnnotation = "storage-gateway/api-field"

// setsFields records that flag sets the given request fields (dotted JSON
// paths, or query parameters).
func setsFields(cmd *cobra.Command, flag string, fields ...string) {
	if err := cmd.Flags().SetAnnotation(flag, apiFieldAnnotation, fields); err != nil {
		panic(err) // a flag name typo in this package
	}
}

// argumentSets records that a positional argument of cmd sets a request
// field: word is what the message calls it instead ("environment id").
func argumentSets(cmd *cobra.Command, field, word string) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[apiFieldAnnotation+":"+field] = word
}

// problemError turns a problem+json answer into an error in the words of
// cmd's flags.
func problemError(cmd *cobra.Command, resp *http.Response, body []byte) error {
	var p api.Problem
	if json.Unmarshal(body, &p) != nil || p.Type == "" {
		return unexpectedAnswer(resp)
	}
	detail := cliWords(cmd, ptr.Deref(p.Field, ""), ptr.Deref(p.Detail, ""))
	switch p.Type {
	case api.UNAUTHENTICATED:
		detail += "; give a token with --gateway-token or SG_GATEWAY_TOKEN, or sign in with `storage-gateway login`"
	case api.PERMISSIONDENIED:
		detail += " (see `storage-gateway tokens list` for the roles of static tokens)"
	}
	return fmt.Errorf("%s (HTTP %d): %s", p.Type, p.Status, detail)
}

// unexpectedAnswer is an answer that is not the API's: most likely
// --gateway names something else.
func unexpectedAnswer(resp *http.Response) error {
	return fmt.Errorf("unexpected answer from %s: HTTP %d (is --gateway the address of a storage-gateway?)",
		resp.Request.URL.Redacted(), resp.StatusCode)
}

// checkOutput refuses an -o value the printers do not know.
func checkOutput(format string) error {
	if !slices.Contains(outputFormats, format) {
		return fmt.Errorf("--output must be one of %s", strings.Join(outputFormats, ", "))
	}
	return nil
}

// cliWords rewrites a problem's detail ("field: what is wrong") to name the
// flag or argument that set the field, and `name=true` query words as the
// flag that sends them. A field set from a manifest rather than a flag keeps
// its name, which is the manifest's key.
func cliWords(cmd *cobra.Command, field, detail string) string {
	named := false
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, apiField := range f.Annotations[apiFieldAnnotation] {
			if f.Value.Type() == "bool" {
				detail = strings.ReplaceAll(detail, apiField+"=true", "--"+f.Name)
			}
			if named || !f.Changed || !strings.HasPrefix(detail, field+": ") {
				continue
			}
			switch {
			case field == apiField: // "namespace: must be ..." → "--namespace: must be ..."
				detail = "--" + f.Name + strings.TrimPrefix(detail, field)
				named = true
			case strings.HasPrefix(field, apiField+"."): // "kubeconfig.users[0]: ..." → "--kubeconfig: users[0]: ..."
				detail = "--" + f.Name + ": " + strings.TrimPrefix(detail, apiField+".")
				named = true
			}
		}
	})
	if word, ok := cmd.Annotations[apiFieldAnnotation+":"+field]; ok && !named && strings.HasPrefix(detail, field+": ") {
		detail = word + strings.TrimPrefix(detail, field)
	}
	// The name of a query parameter the command line set is an API word
	// wherever it stands ("end_time: must not be before start_time"), but
	// not as part of a longer path (spec.provider_hints.kubernetes.access_mode).
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, apiField := range f.Annotations[apiFieldAnnotation] {
			if f.Changed && strings.Contains(apiField, "_") && !strings.Contains(apiField, ".") {
				word := regexp.MustCompile(`(^|[^.\w])` + regexp.QuoteMeta(apiField) + `\b`)
				detail = word.ReplaceAllString(detail, "${1}--"+f.Name)
			}
		}
	})
	return detail
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// completeEnvironments offers the gateway's environment ids to the shell's
// completion: it asks the gateway, and offers nothing when it cannot.
func (c *gatewayClient) completeEnvironments(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 && cmd.Flags().Lookup("environment") == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp // the id argument is given already
	}
	client, err := c.client(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	size := 1000
	resp, err := client.ListEnvironmentsWithResponse(cmd.Context(), &api.ListEnvironmentsParams{MaxPageSize: &size})
	if err != nil || resp.JSON200 == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ids := make([]cobra.Completion, len(resp.JSON200.Environments))
	for i, e := range resp.JSON200.Environments {
		ids[i] = cobra.CompletionWithDesc(e.Id, string(e.Status.State))
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}
