package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// gatewayClient is the admin CLI's connection to a running gateway.
type gatewayClient struct {
	gateway string
	token   string
	output  string
}

func newEnvCommand() *cobra.Command {
	c := &gatewayClient{}
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Manage registered environments through a running gateway's API",
		Long: "env calls the gateway's admin API (SG_GATEWAY_URL, default http://127.0.0.1:8080).\n" +
			"Kubeconfig and credential files are read here and sent inline; the gateway never reads files.",
	}
	c.registerFlags(cmd)
	cmd.AddCommand(c.addCommand(), c.applyCommand(), c.listCommand(), c.getCommand(), c.verifyCommand(), c.rotateCommand(), c.rmCommand())
	return cmd
}

// registerFlags adds the flags that say how to reach the gateway and how to
// print its answers.
func (c *gatewayClient) registerFlags(cmd *cobra.Command) {
	flags := cmd.PersistentFlags()
	flags.StringVar(&c.gateway, "gateway", envOr("SG_GATEWAY_URL", "http://127.0.0.1:8080"), "gateway base URL (default $SG_GATEWAY_URL)")
	// The token's default is read in client(), not here: cobra prints flag
	// defaults in --help.
	flags.StringVar(&c.token, "gateway-token", "", "bearer token for the gateway API (default $SG_GATEWAY_TOKEN, then the token saved by storage-gateway login)")
	flags.StringVarP(&c.output, "output", "o", "table", "output format: table or json")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (c *gatewayClient) client(ctx context.Context) (*api.ClientWithResponses, error) {
	if c.output != "table" && c.output != "json" {
		return nil, errors.New("--output must be table or json")
	}
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
		if token != "" && !secureOrLocal(c.gateway) {
			return nil, fmt.Errorf("the saved login is sent only to an https gateway or one on loopback, not %s", c.gateway)
		}
		c.token = token
	}
	return api.NewClientWithResponses(strings.TrimRight(c.gateway, "/"),
		api.WithHTTPClient(&http.Client{Timeout: time.Minute}),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			return nil
		}))
}

// secureOrLocal reports whether raw is an https URL, or http on loopback.
func secureOrLocal(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return u.Scheme == "http" && (u.Hostname() == "localhost" || err == nil && ip.IsLoopback())
}

// credentialFlags are the ways to hand credentials to add and rotate.
type credentialFlags struct {
	kubeconfig, context                   string
	apiServer, caFile, tokenFile, tlsName string
	clientCertFile, clientKeyFile         string
}

func (f *credentialFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file to send inline")
	fl.StringVar(&f.context, "context", "", "kubeconfig context to use")
	fl.StringVar(&f.apiServer, "api-server", "", "cluster API server URL (explicit credentials instead of a kubeconfig)")
	fl.StringVar(&f.caFile, "ca-file", "", "PEM CA bundle of the API server")
	fl.StringVar(&f.tlsName, "tls-server-name", "", "TLS server name to verify")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding a bearer token")
	fl.StringVar(&f.clientCertFile, "client-cert-file", "", "PEM client certificate")
	fl.StringVar(&f.clientKeyFile, "client-key-file", "", "PEM client key")
}

// apply copies the chosen credentials into in.
func (f *credentialFlags) apply(in *api.EnvironmentInput) error {
	switch {
	case f.kubeconfig != "" && f.apiServer != "":
		return errors.New("use either --kubeconfig or --api-server, not both")
	case f.kubeconfig != "":
		data, err := os.ReadFile(f.kubeconfig)
		if err != nil {
			return err
		}
		s := string(data)
		in.Kubeconfig = &s
		if f.context != "" {
			in.KubeconfigContext = &f.context
		}
		return nil
	case f.apiServer != "":
		return f.applyExplicit(in)
	}
	return errors.New("credentials are required: --kubeconfig FILE, or --api-server URL with --token-file or --client-cert-file/--client-key-file")
}

func (f *credentialFlags) applyExplicit(in *api.EnvironmentInput) error {
	creds := &api.ClusterCredentials{Server: f.apiServer}
	if f.tlsName != "" {
		creds.TlsServerName = &f.tlsName
	}
	for _, file := range []struct {
		path string
		dst  **[]byte
	}{{f.caFile, &creds.CertificateAuthorityData}, {f.clientCertFile, &creds.ClientCertificateData}, {f.clientKeyFile, &creds.ClientKeyData}} {
		if file.path == "" {
			continue
		}
		data, err := os.ReadFile(file.path)
		if err != nil {
			return err
		}
		*file.dst = &data
	}
	if f.tokenFile != "" {
		data, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return err
		}
		token := strings.TrimSpace(string(data))
		creds.Token = &token
	}
	in.Credentials = creds
	return nil
}

// specFlags are the environment's settings on the command line.
type specFlags struct {
	file                                       string
	namespace, region, zone, displayName, desc string
	storageClass                               string
	allowedNamespaces, labels                  []string
	noRegister                                 bool
}

func (f *specFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "environment manifest (YAML with an `environment:` block, as in environments/*.yaml)")
	fl.StringVar(&f.namespace, "namespace", "", "default namespace for volumes (default: the kubeconfig context's)")
	fl.StringSliceVar(&f.allowedNamespaces, "allowed-namespaces", nil, "extra namespaces volumes may use")
	fl.StringVar(&f.region, "region", "", "region label")
	fl.StringVar(&f.zone, "zone", "", "zone label")
	fl.StringVar(&f.displayName, "display-name", "", "display name")
	fl.StringVar(&f.desc, "description", "", "description")
	fl.StringVar(&f.storageClass, "storage-class", "", "default StorageClass")
	fl.StringArrayVar(&f.labels, "label", nil, "label key=value (repeatable)")
	fl.BoolVar(&f.noRegister, "no-dcm-register", false, "do not register the environment as a DCM provider")
}

// input builds the request from the manifest (if any) overlaid with flags;
// it returns the id from the manifest when the command line gave none.
func (f *specFlags) input(cmd *cobra.Command, id string) (string, api.EnvironmentInput, error) {
	var in api.EnvironmentInput
	if f.file != "" {
		var err error
		if id, in, err = readManifest(f.file, id); err != nil {
			return "", in, err
		}
	}
	if id == "" {
		return "", in, errors.New("an environment id is required (argument or `id:` in the manifest)")
	}
	set := func(flag string, dst **string, v string) {
		if cmd.Flags().Changed(flag) {
			*dst = &v
		}
	}
	set("namespace", &in.Namespace, f.namespace)
	set("region", &in.Region, f.region)
	set("zone", &in.Zone, f.zone)
	set("display-name", &in.DisplayName, f.displayName)
	set("description", &in.Description, f.desc)
	if cmd.Flags().Changed("allowed-namespaces") {
		in.AllowedNamespaces = &f.allowedNamespaces
	}
	if cmd.Flags().Changed("storage-class") {
		in.Defaults = &api.EnvironmentDefaults{StorageClass: &f.storageClass}
	}
	if len(f.labels) > 0 {
		labels := map[string]string{}
		for _, kv := range f.labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return "", in, fmt.Errorf("--label must be key=value")
			}
			labels[k] = v
		}
		in.Labels = &labels
	}
	if f.noRegister {
		register := false
		in.Dcm = &api.DCMSettings{Register: &register}
	}
	return id, in, nil
}

// manifest is the file format of environments/*.yaml: other top-level keys
// (such as the harness's `cluster:`) are ignored.
type manifest struct {
	Environment json.RawMessage `json:"environment"`
}

func readManifest(path, id string) (string, api.EnvironmentInput, error) {
	var in api.EnvironmentInput
	data, err := os.ReadFile(path)
	if err != nil {
		return "", in, err
	}
	var m manifest
	if err := yaml.Unmarshal(data, &m); err != nil || m.Environment == nil {
		return "", in, fmt.Errorf("%s: want a YAML document with an `environment:` block", path)
	}
	var withID struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(m.Environment, &withID)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(m.Environment, &fields); err != nil {
		return "", in, fmt.Errorf("%s: environment: %w", path, err)
	}
	delete(fields, "id")
	rest, _ := json.Marshal(fields)
	dec := json.NewDecoder(strings.NewReader(string(rest)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return "", in, fmt.Errorf("%s: environment: %w", path, err)
	}
	if id == "" {
		id = withID.ID
	}
	return id, in, nil
}

func (c *gatewayClient) addCommand() *cobra.Command {
	cmd := c.writeCommand("add [ID]", "Register an environment (the gateway probes the cluster first)", c.create)
	cmd.Example = "  storage-gateway env add east --kubeconfig ~/.kube/config --context east --namespace dcm\n" +
		"  storage-gateway env add -f environments/local-east.yaml --kubeconfig east.kubeconfig"
	return cmd
}

func (c *gatewayClient) applyCommand() *cobra.Command {
	return c.writeCommand("apply [ID]", "Register an environment, or update its settings and rotate its credentials if it exists", c.apply)
}

// writeCommand builds a command that assembles an environment from a
// manifest, flags and credential files and hands it to write.
func (c *gatewayClient) writeCommand(use, short string, write func(*cobra.Command, string, api.EnvironmentInput) error) *cobra.Command {
	var spec specFlags
	var creds credentialFlags
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, in, err := spec.input(cmd, firstArg(args))
			if err != nil {
				return err
			}
			if err := creds.apply(&in); err != nil {
				return err
			}
			return write(cmd, id, in)
		},
	}
	spec.register(cmd)
	creds.register(cmd)
	return cmd
}

func (c *gatewayClient) create(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
	client, err := c.client(cmd.Context())
	if err != nil {
		return err
	}
	resp, err := client.CreateEnvironmentWithResponse(cmd.Context(), &api.CreateEnvironmentParams{Id: id}, in)
	if err != nil {
		return err
	}
	return c.printEnvironment(cmd, resp.HTTPResponse, resp.Body)
}

// apply creates the environment, or merge-patches everything in into it.
func (c *gatewayClient) apply(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
	client, err := c.client(cmd.Context())
	if err != nil {
		return err
	}
	got, err := client.GetEnvironmentWithResponse(cmd.Context(), id)
	if err != nil {
		return err
	}
	if got.StatusCode() == http.StatusNotFound {
		return c.create(cmd, id, in)
	}
	return c.patch(cmd, id, in)
}

// patch sends in as a merge patch: fields left nil are left unchanged.
func (c *gatewayClient) patch(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
	client, err := c.client(cmd.Context())
	if err != nil {
		return err
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	resp, err := client.UpdateEnvironmentWithBodyWithResponse(cmd.Context(), id, "application/merge-patch+json", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	return c.printEnvironment(cmd, resp.HTTPResponse, resp.Body)
}

func (c *gatewayClient) rotateCommand() *cobra.Command {
	var creds credentialFlags
	cmd := &cobra.Command{
		Use:   "rotate ID",
		Short: "Replace an environment's credentials (probed before they are stored)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in api.EnvironmentInput // only credentials set: nothing else changes
			if err := creds.apply(&in); err != nil {
				return err
			}
			return c.patch(cmd, args[0], in)
		},
	}
	creds.register(cmd)
	return cmd
}

func (c *gatewayClient) listCommand() *cobra.Command {
	var region, state string
	var labels []string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List environments (all pages)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			params := api.ListEnvironmentsParams{}
			if region != "" {
				params.Region = &region
			}
			if state != "" {
				s := api.EnvironmentState(strings.ToUpper(state))
				params.State = &s
			}
			if len(labels) > 0 {
				sel := strings.Join(labels, ",")
				params.LabelSelector = &sel
			}
			all, err := allPages(func(token *string) ([]api.Environment, *string, error) {
				params.PageToken = token
				resp, err := client.ListEnvironmentsWithResponse(cmd.Context(), &params)
				if err != nil {
					return nil, nil, err
				}
				if resp.JSON200 == nil {
					return nil, nil, problemError(resp.HTTPResponse, resp.Body)
				}
				return resp.JSON200.Environments, resp.JSON200.NextPageToken, nil
			})
			if err != nil {
				return err
			}
			return c.print(cmd.OutOrStdout(), all, false)
		},
	}
	cmd.Flags().StringVar(&region, "region", "", "only this region")
	cmd.Flags().StringVar(&state, "state", "", "only this state (READY, UNREACHABLE, ...)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only environments with label key=value (repeatable)")
	return cmd
}

func (c *gatewayClient) getCommand() *cobra.Command {
	return c.idCommand("get ID", "Show one environment", func(ctx context.Context, client *api.ClientWithResponses, id string) (*http.Response, error) {
		return client.GetEnvironment(ctx, id)
	})
}

func (c *gatewayClient) verifyCommand() *cobra.Command {
	return c.idCommand("verify ID", "Probe an environment now and show the result", func(ctx context.Context, client *api.ClientWithResponses, id string) (*http.Response, error) {
		return client.VerifyEnvironment(ctx, id)
	})
}

// idCommand builds a command that sends one request about the environment
// named by its argument and prints the environment it answers with.
func (c *gatewayClient) idCommand(use, short string, send func(context.Context, *api.ClientWithResponses, string) (*http.Response, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := send(cmd.Context(), client, args[0])
			if err != nil {
				return err
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			return c.printEnvironment(cmd, resp, body)
		},
	}
}

func (c *gatewayClient) rmCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm ID",
		Short: "Delete an environment (refused while it has volumes unless --force; PVCs are never deleted)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.DeleteEnvironmentWithResponse(cmd.Context(), args[0], &api.DeleteEnvironmentParams{Force: &force})
			if err != nil {
				return err
			}
			if resp.StatusCode() != http.StatusNoContent {
				return problemError(resp.HTTPResponse, resp.Body)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted %s\n", args[0])
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "forget the environment and its volume records even if volumes exist")
	return cmd
}

// printEnvironment prints a single-environment response or its problem.
func (c *gatewayClient) printEnvironment(cmd *cobra.Command, resp *http.Response, body []byte) error {
	if resp.StatusCode >= http.StatusBadRequest {
		return problemError(resp, body)
	}
	var env api.Environment
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("unexpected response from the gateway (HTTP %d)", resp.StatusCode)
	}
	return c.print(cmd.OutOrStdout(), []api.Environment{env}, true)
}

// print writes environments as a table, or as JSON: one object for a single
// environment, an array (possibly empty) for a list.
func (c *gatewayClient) print(w io.Writer, envs []api.Environment, single bool) error {
	if c.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if single {
			return enc.Encode(envs[0])
		}
		if envs == nil {
			envs = []api.Environment{}
		}
		return enc.Encode(envs)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tSERVER\tNAMESPACES\tREGION\tKUBERNETES\tVOLUMES\tMESSAGE")
	for _, e := range envs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.Id, e.Status.State, cell(e.Connection.Server),
			cell(strings.Join(append([]string{e.Namespace}, e.AllowedNamespaces...), ",")), cell(e.Region),
			cell(derefString(e.Status.KubernetesVersion)), e.Status.VolumeCount, cell(e.Status.Message))
	}
	return tw.Flush()
}

// allPages collects every page of a list: fetch gets the page token (nil
// for the first page) and returns the items and the next token (nil on the
// last page).
func allPages[T any](fetch func(token *string) ([]T, *string, error)) ([]T, error) {
	var all []T
	var token *string
	for {
		items, next, err := fetch(token)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if next == nil {
			return all, nil
		}
		token = next
	}
}

// problemError turns a problem+json answer into an error for the terminal.
func problemError(resp *http.Response, body []byte) error {
	var p api.Problem
	if json.Unmarshal(body, &p) != nil || p.Type == "" {
		return fmt.Errorf("gateway answered HTTP %d", resp.StatusCode)
	}
	return fmt.Errorf("%s (HTTP %d): %s", p.Type, p.Status, derefString(p.Detail))
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}
