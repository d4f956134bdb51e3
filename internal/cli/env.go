package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/internal/api"
)

func newEnvCommand() *cobra.Command {
	c := &gatewayClient{}
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Manage registered environments through a running gateway's API",
		Long: "env calls the gateway's admin API (--gateway, or SG_GATEWAY_URL; http://127.0.0.1:8080 when neither is set).\n" +
			"Kubeconfig and credential files are read here and sent inline; the gateway never reads files.",
		Example: "  storage-gateway env list\n  storage-gateway env get local-east",
	}
	c.registerFlags(cmd)
	cmd.AddCommand(c.addCommand(), c.applyCommand(), c.bootstrapCommand(), c.unbootstrapCommand(), c.listCommand(), c.getCommand(),
		c.verifyCommand(), c.adoptCommand(), c.rotateCommand(), c.rmCommand())
	return cmd
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
	for flag, field := range map[string]string{
		"kubeconfig": "kubeconfig", "context": "kubeconfig_context", "api-server": "credentials.server",
		"ca-file": "credentials.certificate_authority_data", "tls-server-name": "credentials.tls_server_name",
		"token-file": "credentials.token", "client-cert-file": "credentials.client_certificate_data",
		"client-key-file": "credentials.client_key_data",
	} {
		setsFields(cmd, flag, field)
	}
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
	return errNoCredentials
}

// errNoCredentials says no credentials were given: a registration needs
// them, an update of an existing environment's settings does not.
var errNoCredentials = errors.New("credentials are required: --kubeconfig FILE, or --api-server URL with --token-file or --client-cert-file/--client-key-file")

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
	storageClass, accessMode, volumeMode       string
	allowedNamespaces, labels                  []string
	dcmRegister, noRegister, shareNamespace    bool
	dcmProviderName                            string
}

func (f *specFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "environment manifest: YAML with an environment block, as in environments/*.yaml")
	fl.StringVar(&f.namespace, "namespace", "", "default namespace for volumes (when empty: the kubeconfig context's)")
	fl.StringSliceVar(&f.allowedNamespaces, "allowed-namespaces", nil, "extra namespaces volumes may use")
	fl.StringVar(&f.region, "region", "", "region label")
	fl.StringVar(&f.zone, "zone", "", "zone label")
	fl.StringVar(&f.displayName, "display-name", "", "display name")
	fl.StringVar(&f.desc, "description", "", "description")
	fl.StringVar(&f.storageClass, "storage-class", "", "default StorageClass of volumes")
	fl.StringVar(&f.accessMode, "access-mode", "", "default access mode of volumes: RWO, ROX or RWX (or ReadWriteOnce, ...); not RWOP, which DCM's volume contract lacks")
	fl.StringVar(&f.volumeMode, "volume-mode", "", "default volume mode of volumes: Filesystem or Block (in any case)")
	fl.StringArrayVar(&f.labels, "label", nil, "label key=value (repeatable)")
	fl.BoolVar(&f.dcmRegister, "dcm-register", true, "register the environment as a DCM provider (--dcm-register=false: do not)")
	fl.BoolVar(&f.noRegister, "no-dcm-register", false, "do not register the environment as a DCM provider")
	_ = fl.MarkDeprecated("no-dcm-register", "use --dcm-register=false")
	fl.StringVar(&f.dcmProviderName, "dcm-provider-name", "", "its provider name in DCM, storage-gateway-ID when unset; an existing provider's name takes that provider over")
	fl.BoolVar(&f.shareNamespace, "share-namespace", false, "serve namespaces another environment on the same cluster serves too, each environment "+
		"seeing only the claims it made (refused without it); recorded in the audit trail")
	for flag, field := range map[string]string{
		"namespace": "namespace", "allowed-namespaces": "allowed_namespaces", "region": "region", "zone": "zone",
		"display-name": "display_name", "description": "description", "storage-class": "defaults.storage_class",
		"access-mode": "defaults.access_mode", "volume-mode": "defaults.volume_mode", "label": "labels",
		"dcm-register": "dcm.register", "dcm-provider-name": "dcm.provider_name", "no-dcm-register": "dcm.register",
		"share-namespace": "share_namespaces",
	} {
		setsFields(cmd, flag, field)
	}
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
		return "", in, errors.New("an environment id is required (argument or id: in the manifest)")
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
	if cmd.Flags().Changed("share-namespace") {
		in.ShareNamespaces = &f.shareNamespace
	}
	if err := f.defaults(cmd, &in); err != nil {
		return "", in, err
	}
	if len(f.labels) > 0 {
		labels, err := keyValues("--label", f.labels)
		if err != nil {
			return "", in, err
		}
		in.Labels = &labels
	}
	if f.noRegister {
		f.dcmRegister = false
		if err := cmd.Flags().Set("dcm-register", "false"); err != nil {
			return "", in, err
		}
	}
	if cmd.Flags().Changed("dcm-register") || cmd.Flags().Changed("dcm-provider-name") {
		if in.Dcm == nil {
			in.Dcm = &api.DCMSettings{}
		}
		if cmd.Flags().Changed("dcm-register") {
			in.Dcm.Register = &f.dcmRegister
		}
		if cmd.Flags().Changed("dcm-provider-name") {
			in.Dcm.ProviderName = &f.dcmProviderName
		}
	}
	return id, in, nil
}

// defaults overlays the volume default flags on the manifest's defaults.
func (f *specFlags) defaults(cmd *cobra.Command, in *api.EnvironmentInput) error {
	if !cmd.Flags().Changed("storage-class") && !cmd.Flags().Changed("access-mode") && !cmd.Flags().Changed("volume-mode") {
		return nil
	}
	if in.Defaults == nil {
		in.Defaults = &api.EnvironmentDefaults{}
	}
	if cmd.Flags().Changed("storage-class") {
		in.Defaults.StorageClass = &f.storageClass
	}
	if cmd.Flags().Changed("access-mode") {
		mode, err := accessModeFlag(f.accessMode, volumeAccessModes)
		if err != nil {
			return err
		}
		m := api.AccessMode(mode)
		in.Defaults.AccessMode = &m
	}
	if cmd.Flags().Changed("volume-mode") {
		m, err := volumeModeFlag(f.volumeMode)
		if err != nil {
			return err
		}
		in.Defaults.VolumeMode = &m
	}
	return nil
}

// keyValues reads repeated key=value flags.
func keyValues(flag string, pairs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%s %q: want key=value", flag, kv)
		}
		m[k] = v
	}
	return m, nil
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
	expandAccessModes(&in)
	return id, in, nil
}

// expandAccessModes writes the access modes of a manifest written the way
// the tables print them (RWO, ...) by their Kubernetes names; anything else
// is left for the gateway to judge.
func expandAccessModes(in *api.EnvironmentInput) {
	if in.Defaults != nil && in.Defaults.AccessMode != nil {
		full, _ := fullAccessMode(string(*in.Defaults.AccessMode))
		*in.Defaults.AccessMode = api.AccessMode(full)
	}
	if in.CapabilityOverrides == nil {
		return
	}
	for _, overrides := range []*map[string]api.CapabilityOverride{in.CapabilityOverrides.Provisioners, in.CapabilityOverrides.StorageClasses} {
		if overrides == nil {
			continue
		}
		for _, o := range *overrides {
			if o.AccessModes == nil {
				continue
			}
			for i, m := range *o.AccessModes {
				full, _ := fullAccessMode(string(m))
				(*o.AccessModes)[i] = api.KubernetesAccessMode(full)
			}
		}
	}
}

func (c *gatewayClient) addCommand() *cobra.Command {
	cmd := c.writeCommand("add [ID]", "Register an environment (the gateway probes the cluster first)", c.create)
	cmd.Example = "  storage-gateway env add east --kubeconfig ~/.kube/config --context east --namespace dcm\n" +
		"  storage-gateway env add -f environments/local-east.yaml --kubeconfig east.kubeconfig\n" +
		"  storage-gateway env add west --api-server https://west.example.com:6443 --ca-file ca.crt --token-file token --namespace dcm"
	return cmd
}

func (c *gatewayClient) applyCommand() *cobra.Command {
	var takeOver bool
	cmd := c.writeCommand("apply [ID]", "Register an environment, or update its settings (and rotate its credentials, if given) if it exists",
		func(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
			if !takeOver {
				return c.apply(cmd, id, in)
			}
			// The settings first, unprinted: what is printed is the
			// take-over's outcome.
			a, err := c.send(cmd, id, in, true)
			switch {
			case err != nil:
				return err
			case a.resp.StatusCode >= http.StatusBadRequest:
				return problemError(cmd, a.resp, a.body)
			}
			return c.takeOver(cmd, id)
		})
	cmd.Example = "  storage-gateway env apply -f environments/local-east.yaml --kubeconfig east.kubeconfig\n" +
		"  storage-gateway env apply east --dcm-register   # one setting, credentials unchanged\n" +
		"  storage-gateway env apply east --dcm-register --dcm-take-over   # register even over DCM instances it does not serve"
	cmd.Flags().BoolVar(&takeOver, "dcm-take-over", false, "register the DCM provider name now even though DCM holds instances of it "+
		"this environment does not serve (DCM then forgets them: the gateway answers 404); recorded in the audit trail")
	return cmd
}

// takeOver asks the gateway to register id's DCM provider name now,
// whatever DCM holds under it, and prints the environment.
func (c *gatewayClient) takeOver(cmd *cobra.Command, id string) error {
	client, err := c.client(cmd.Context())
	if err != nil {
		return err
	}
	resp, err := client.TakeOverDCMProviderWithResponse(cmd.Context(), id)
	if err != nil {
		return err
	}
	return c.printEnvironment(cmd, resp.HTTPResponse, resp.Body, true)
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
			if err := creds.apply(&in); err != nil && !errors.Is(err, errNoCredentials) {
				return err
			}
			return write(cmd, id, in)
		},
	}
	spec.register(cmd)
	creds.register(cmd)
	argumentSets(cmd, "id", "environment id")
	return cmd
}

func (c *gatewayClient) create(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
	return c.printed(cmd)(c.send(cmd, id, in, false))
}

// apply creates the environment, or merge-patches everything in into it.
func (c *gatewayClient) apply(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
	return c.printed(cmd)(c.send(cmd, id, in, true))
}

// patch sends in as a merge patch: fields left nil are left unchanged.
func (c *gatewayClient) patch(cmd *cobra.Command, id string, in api.EnvironmentInput) error {
	return c.printed(cmd)(c.sendPatch(cmd, id, in))
}

// answer is the gateway's answer to a write, its body read (and closed) by
// the generated client.
type answer struct {
	resp *http.Response
	body []byte
}

// send registers the environment — with orUpdate, merge-patches it if it
// exists — and returns the gateway's answer unprinted.
func (c *gatewayClient) send(cmd *cobra.Command, id string, in api.EnvironmentInput, orUpdate bool) (answer, error) {
	client, err := c.client(cmd.Context())
	if err != nil {
		return answer{}, err
	}
	if orUpdate {
		got, err := client.GetEnvironmentWithResponse(cmd.Context(), id)
		if err != nil {
			return answer{}, err
		}
		if got.StatusCode() != http.StatusNotFound {
			return c.sendPatch(cmd, id, in)
		}
	}
	if in.Kubeconfig == nil && in.Credentials == nil {
		return answer{}, errNoCredentials
	}
	resp, err := client.CreateEnvironmentWithResponse(cmd.Context(), &api.CreateEnvironmentParams{Id: id}, in)
	if err != nil {
		return answer{}, err
	}
	return answer{resp.HTTPResponse, resp.Body}, nil
}

// sendPatch sends in as a merge patch and returns the answer unprinted.
func (c *gatewayClient) sendPatch(cmd *cobra.Command, id string, in api.EnvironmentInput) (answer, error) {
	client, err := c.client(cmd.Context())
	if err != nil {
		return answer{}, err
	}
	body, err := json.Marshal(in)
	if err != nil {
		return answer{}, err
	}
	resp, err := client.UpdateEnvironmentWithBodyWithResponse(cmd.Context(), id, "application/merge-patch+json", strings.NewReader(string(body)))
	if err != nil {
		return answer{}, err
	}
	return answer{resp.HTTPResponse, resp.Body}, nil
}

// printed prints a write's answer as its list row, or its error.
func (c *gatewayClient) printed(cmd *cobra.Command) func(answer, error) error {
	return func(a answer, err error) error {
		if err != nil {
			return err
		}
		return c.printEnvironment(cmd, a.resp, a.body, false)
	}
}

func (c *gatewayClient) rotateCommand() *cobra.Command {
	var creds credentialFlags
	cmd := &cobra.Command{
		Use:   "rotate ID",
		Short: "Replace an environment's credentials (probed before they are stored)",
		Example: "  storage-gateway env rotate east --kubeconfig east-new.kubeconfig\n" +
			"  storage-gateway env rotate west --api-server https://west.example.com:6443 --ca-file ca.crt --token-file new-token",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeEnvironments,
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
	var region, state, selector string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List environments (all pages)",
		Example: "  storage-gateway env list\n  storage-gateway env list -l tier=prod,region!=eu --state READY\n" +
			"  storage-gateway env list -l '!deprecated' -o name",
		Args: cobra.NoArgs,
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
			if selector != "" {
				params.LabelSelector = &selector
			}
			all, err := allPages(func(token *string) ([]api.Environment, *string, error) {
				params.PageToken = token
				resp, err := client.ListEnvironmentsWithResponse(cmd.Context(), &params)
				if err != nil {
					return nil, nil, err
				}
				if resp.JSON200 == nil {
					return nil, nil, problemError(cmd, resp.HTTPResponse, resp.Body)
				}
				return resp.JSON200.Environments, resp.JSON200.NextPageToken, nil
			})
			if err != nil {
				return err
			}
			return printItems(cmd.OutOrStdout(), c.output, all, false, environmentTable, nil)
		},
	}
	cmd.Flags().StringVar(&region, "region", "", "only this region")
	cmd.Flags().StringVar(&state, "state", "", "only this state: READY, DEGRADED, UNREACHABLE, UNAUTHORIZED or PENDING")
	cmd.Flags().StringVarP(&selector, "selector", "l", "",
		"label selector as kubectl takes it: k=v, k!=v, 'k in (a,b)', 'k notin (a,b)', k, !k; comma-separated terms must all hold")
	setsFields(cmd, "region", "region")
	setsFields(cmd, "state", "state")
	setsFields(cmd, "selector", "label_selector")
	return cmd
}

func (c *gatewayClient) getCommand() *cobra.Command {
	cmd := c.idCommand("get ID", "Show one environment: labels, namespaces, connection, status, DCM registration, overrides",
		func(ctx context.Context, client *api.ClientWithResponses, id string) (*http.Response, error) {
			return client.GetEnvironment(ctx, id)
		})
	cmd.Example = "  storage-gateway env get local-east\n  storage-gateway env get local-east -o yaml"
	return cmd
}

func (c *gatewayClient) verifyCommand() *cobra.Command {
	cmd := c.idCommand("verify ID", "Probe an environment now and show the result",
		func(ctx context.Context, client *api.ClientWithResponses, id string) (*http.Response, error) {
			return client.VerifyEnvironment(ctx, id)
		})
	cmd.Example = "  storage-gateway env verify local-east"
	return cmd
}

// idCommand builds a command that sends one request about the environment
// named by its argument and prints the environment it answers with.
func (c *gatewayClient) idCommand(use, short string, send func(context.Context, *api.ClientWithResponses, string) (*http.Response, error)) *cobra.Command {
	return &cobra.Command{
		Use:               use,
		Short:             short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeEnvironments,
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
			return c.printEnvironment(cmd, resp, body, true)
		},
	}
}

func (c *gatewayClient) rmCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:               "rm ID",
		Short:             "Delete an environment (refused while it has volumes unless --force; PVCs are never deleted)",
		Example:           "  storage-gateway env rm east\n  storage-gateway env rm east --force",
		Aliases:           []string{"delete"},
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeEnvironments,
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
				return problemError(cmd, resp.HTTPResponse, resp.Body)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "environment/%s deleted\n", args[0])
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "forget the environment and its volume records even if volumes exist")
	setsFields(cmd, "force", "force")
	return cmd
}

// printEnvironment prints a single-environment response or its problem:
// in the table formats, as the detailed view when detailed is set (get,
// verify), else as its list row (add, apply, rotate).
func (c *gatewayClient) printEnvironment(cmd *cobra.Command, resp *http.Response, body []byte, detailed bool) error {
	if resp.StatusCode >= http.StatusBadRequest {
		return problemError(cmd, resp, body)
	}
	var env api.Environment
	if err := json.Unmarshal(body, &env); err != nil {
		return unexpectedAnswer(resp)
	}
	var describe func(io.Writer, api.Environment) error
	if detailed {
		describe = describeEnvironment
	}
	return printItems(cmd.OutOrStdout(), c.output, []api.Environment{env}, true, environmentTable, describe)
}

// environmentTable is how environments print as rows.
var environmentTable = table[api.Environment]{
	kind: "environment",
	name: func(e api.Environment) string { return e.Id },
	columns: []column[api.Environment]{
		{header: "ID", value: func(e api.Environment) string { return e.Id }},
		{header: "STATE", value: func(e api.Environment) string { return string(e.Status.State) }},
		{header: "SERVER", value: func(e api.Environment) string { return e.Connection.Server }},
		{header: "NAMESPACES", value: func(e api.Environment) string {
			return strings.Join(append([]string{e.Namespace}, e.AllowedNamespaces...), ",")
		}},
		{header: "REGION", value: func(e api.Environment) string { return e.Region }},
		{header: "ZONE", wide: true, value: func(e api.Environment) string { return e.Zone }},
		{header: "KUBERNETES", value: func(e api.Environment) string { return ptr.Deref(e.Status.KubernetesVersion, "") }},
		{header: "VOLUMES", value: func(e api.Environment) string { return strconv.Itoa(e.Status.VolumeCount) }},
		{header: "CLASSES", wide: true, value: func(e api.Environment) string { return optionalInt(e.Status.StorageClassCount) }},
		{header: "DCM", wide: true, value: func(e api.Environment) string { return dcmState(e) }},
		{header: "LABELS", wide: true, value: func(e api.Environment) string { return joinLabels(e.Labels) }},
		{header: "MESSAGE", value: func(e api.Environment) string { return e.Status.Message }},
	},
}

// describeEnvironment is the detailed view of one environment.
func describeEnvironment(w io.Writer, e api.Environment) error {
	d := newDetails(w)
	d.add("ID", e.Id)
	d.add("Display name", e.DisplayName)
	d.add("Description", e.Description)
	d.add("Labels", joinLabels(e.Labels))
	d.add("Region", e.Region)
	d.add("Zone", e.Zone)
	d.add("Namespace", e.Namespace)
	d.add("Allowed namespaces", strings.Join(e.AllowedNamespaces, ", "))
	if e.ShareNamespaces {
		d.add("Shares namespaces", "yes: another environment of its cluster may serve them; each serves only its own claims")
	}
	d.add("Cluster", ptr.Deref(e.Status.ClusterId, ""))
	d.add("State", string(e.Status.State))
	d.add("Message", e.Status.Message)
	d.add("Kubernetes", ptr.Deref(e.Status.KubernetesVersion, ""))
	d.add("Volumes", strconv.Itoa(e.Status.VolumeCount))
	if n := e.Status.UnadoptedVolumeCount; n > 0 {
		d.add("Unadopted claims", fmt.Sprintf("%d labelled for DCM by another provider (storage-gateway env adopt %s)", n, e.Id))
	}
	d.add("Storage classes", optionalInt(e.Status.StorageClassCount))
	d.add("Last probe", optionalTime(e.Status.LastProbeTime))
	d.add("Last ready", optionalTime(e.Status.LastReadyTime))
	d.add("Server", e.Connection.Server)
	d.add("TLS server name", ptr.Deref(e.Connection.TlsServerName, ""))
	d.add("Authentication", string(e.Connection.AuthType))
	d.add("CA (SHA-256)", e.Connection.CaSha256)
	if e.Connection.InsecureSkipTlsVerify != nil && *e.Connection.InsecureSkipTlsVerify {
		d.add("TLS verification", "OFF (insecure-skip-tls-verify)")
	}
	d.add("Credentials sealed with key", e.Connection.KeyId)
	d.add("Credentials updated", e.Connection.CredentialsUpdateTime.Local().Format(time.RFC3339))
	if at := e.Connection.CredentialsExpireTime; at != nil {
		d.add("Credentials expire", fmt.Sprintf("%s (%s)", at.Local().Format(time.RFC3339), untilExpiry(*at, time.Now())))
	}
	d.add("Default storage class", ptr.Deref(e.Defaults.StorageClass, ""))
	if e.Defaults.AccessMode != nil {
		d.add("Default access mode", string(*e.Defaults.AccessMode))
	}
	if e.Defaults.VolumeMode != nil {
		d.add("Default volume mode", string(*e.Defaults.VolumeMode))
	}
	d.add("DCM provider name", ptr.Deref(e.Dcm.ProviderName, ""))
	if r := e.Status.DcmRegistration; r != nil {
		d.add("DCM registration", strings.TrimSuffix(ptr.Deref(r.State, "")+": "+ptr.Deref(r.Message, ""), ": "))
		d.add("DCM provider id", ptr.Deref(r.ProviderId, ""))
		if r.DisplacedBy != nil {
			held := *r.DisplacedBy + " since " + optionalTime(r.DisplacedTime)
			if r.ReclaimTime != nil {
				held += ", taken back " + optionalTime(r.ReclaimTime)
			}
			d.add("DCM name held by", held)
		}
		if n := ptr.Deref(r.InstancesWithoutClaim, 0); n > 0 {
			d.add("DCM instances without claim", fmt.Sprintf("%d, not served here nor adoptable (%s), counted %s", n,
				strings.Join(ptr.Deref(r.InstancesWithoutClaimIds, nil), ", "), optionalTime(r.InstancesCheckTime)))
		}
	}
	for _, o := range overrides("provisioner", e.CapabilityOverrides.Provisioners) {
		d.add("Override", o)
	}
	for _, o := range overrides("storage class", e.CapabilityOverrides.StorageClasses) {
		d.add("Override", o)
	}
	d.add("Created", e.CreateTime.Local().Format(time.RFC3339))
	d.add("Updated", e.UpdateTime.Local().Format(time.RFC3339))
	return d.flush()
}

// overrides describes capability overrides one per line, sorted by name.
func overrides(what string, m *map[string]api.CapabilityOverride) []string {
	if m == nil {
		return nil
	}
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(*m)) {
		o := (*m)[name]
		var parts []string
		if o.AccessModes != nil {
			parts = append(parts, "access modes "+joinNames(*o.AccessModes, ","))
		}
		if o.VolumeModes != nil {
			parts = append(parts, "volume modes "+joinNames(*o.VolumeModes, ","))
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s", what, name, strings.Join(parts, "; ")))
	}
	return lines
}

// joinNames joins enum values (modes, roles) with sep.
func joinNames[S ~string](items []S, sep string) string {
	names := make([]string, len(items))
	for i, item := range items {
		names[i] = string(item)
	}
	return strings.Join(names, sep)
}

func dcmState(e api.Environment) string {
	if e.Status.DcmRegistration == nil {
		return ""
	}
	return ptr.Deref(e.Status.DcmRegistration.State, "")
}

// untilExpiry says how long credentials that expire at have left, or that
// they have expired.
func untilExpiry(at, now time.Time) string {
	left := at.Sub(now)
	switch {
	case left <= 0:
		return "expired"
	case left < 48*time.Hour:
		return "in " + left.Round(time.Minute).String()
	}
	return fmt.Sprintf("in %d days", int(left.Hours()/24))
}

func joinLabels(labels map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return strings.Join(pairs, ",")
}

func optionalInt(n *int) string {
	if n == nil {
		return ""
	}
	return strconv.Itoa(*n)
}

func optionalTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Local().Format(time.RFC3339)
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
