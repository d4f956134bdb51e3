package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// newClassesCommand prints the fleet's StorageClasses for humans: a matrix
// of class × environment.
func newClassesCommand() *cobra.Command {
	c := &gatewayClient{}
	var params api.ListStorageClassesParams
	var environments []string
	var region, provisioner, accessMode, volumeMode, tier string
	var expandable, isDefault, snapshots bool
	cmd := &cobra.Command{
		Use:   "classes",
		Short: "Show StorageClasses across the fleet: one row per class, one column per environment",
		Long: "classes asks a running gateway (SG_GATEWAY_URL) for its fleet view. A cell lists the access modes\n" +
			"the class supports there (? when unknown), then: exp (expandable), default, and the capacity\n" +
			"its driver publishes; - means the environment has no such class. A stale column is an\n" +
			"environment the gateway cannot reach now: its last known classes, as of the time shown.",
		Example: "  storage-gateway classes\n  storage-gateway classes --access-mode RWX --expandable\n  storage-gateway classes --snapshots --tier gold\n" +
			"  storage-gateway classes -e east -e west -o wide\n  storage-gateway classes --default=false -o name",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			if err := classFilters(&params, environments, region, provisioner, accessMode, volumeMode); err != nil {
				return err
			}
			// --expandable and --default are switches; =false asks for the
			// others.
			if cmd.Flags().Changed("expandable") {
				params.Expandable = &expandable
			}
			if cmd.Flags().Changed("default") {
				params.IsDefault = &isDefault
			}
			if cmd.Flags().Changed("snapshots") {
				params.Snapshots = &snapshots
			}
			setStrings(map[**string]string{&params.Tier: tier})
			all, err := allPages(func(token *string) ([]api.FleetStorageClass, *string, error) {
				params.PageToken = token
				resp, err := client.ListStorageClassesWithResponse(cmd.Context(), &params)
				if err != nil {
					return nil, nil, err
				}
				if resp.JSON200 == nil {
					return nil, nil, problemError(cmd, resp.HTTPResponse, resp.Body)
				}
				return resp.JSON200.StorageClasses, resp.JSON200.NextPageToken, nil
			})
			if err != nil {
				return err
			}
			switch c.output {
			case "table", "wide":
				return printClassMatrix(cmd.OutOrStdout(), all, time.Now(), c.output == "wide")
			}
			return printItems(cmd.OutOrStdout(), c.output, all, false, classTable, nil)
		},
	}
	c.registerFlags(cmd)
	f := cmd.Flags()
	f.StringArrayVarP(&environments, "environment", "e", nil, "only this environment (repeatable)")
	f.StringVar(&region, "region", "", "only environments in this region")
	f.StringVar(&provisioner, "provisioner", "", "only classes of this provisioner")
	f.StringVar(&accessMode, "access-mode", "", "only classes known to support this access mode: RWO, ROX, RWX or RWOP (or ReadWriteOnce, ...)")
	f.StringVar(&volumeMode, "volume-mode", "", "only classes known to support this volume mode: Filesystem or Block")
	f.BoolVar(&expandable, "expandable", false, "only classes that allow expansion (--expandable=false: only fixed-size ones)")
	f.BoolVar(&isDefault, "default", false, "only default classes (--default=false: only the others)")
	f.BoolVar(&snapshots, "snapshots", false, "only classes known to be snapshottable (--snapshots=false: known not to be)")
	f.StringVar(&tier, "tier", "", "only classes whose driver has this performance tier (VolumeAttributesClass)")
	for flag, field := range map[string]string{
		"environment": "environment", "region": "region", "provisioner": "provisioner", "access-mode": "access_mode",
		"volume-mode": "volume_mode", "expandable": "expandable", "default": "is_default", "snapshots": "snapshots", "tier": "tier",
	} {
		setsFields(cmd, flag, field)
	}
	return cmd
}

// classTable is how classes print with -o name.
var classTable = table[api.FleetStorageClass]{kind: "storageclass", name: func(c api.FleetStorageClass) string { return c.Name }}

// classFilters turns the command's string flags into query parameters.
func classFilters(p *api.ListStorageClassesParams, environments []string, region, provisioner, accessMode, volumeMode string) error {
	if len(environments) > 0 {
		p.Environment = &environments
	}
	setStrings(map[**string]string{&p.Region: region, &p.Provisioner: provisioner})
	var err error
	p.AccessMode, p.VolumeMode, err = modeFilters(accessMode, volumeMode)
	return err
}

// setStrings points each destination at its flag's value, where one was
// given.
func setStrings(flags map[**string]string) {
	for dst, v := range flags {
		if v != "" {
			*dst = &v
		}
	}
}

// modeFilters reads the fleet commands' --access-mode (any a class may
// support) and --volume-mode flags; nil where a flag was not given.
func modeFilters(accessMode, volumeMode string) (*api.KubernetesAccessMode, *api.VolumeMode, error) {
	var access *api.KubernetesAccessMode
	if accessMode != "" {
		mode, err := accessModeFlag(accessMode, classAccessModes)
		if err != nil {
			return nil, nil, err
		}
		access = ptr.To(api.KubernetesAccessMode(mode))
	}
	var volume *api.VolumeMode
	if volumeMode != "" {
		mode, err := volumeModeFlag(volumeMode)
		if err != nil {
			return nil, nil, err
		}
		volume = &mode
	}
	return access, volume, nil
}

// volumeModeFlag reads the --volume-mode flag's value, in any case.
func volumeModeFlag(v string) (api.VolumeMode, error) {
	for _, m := range []api.VolumeMode{api.Filesystem, api.Block} {
		if strings.EqualFold(v, string(m)) {
			return m, nil
		}
	}
	return "", fmt.Errorf("--volume-mode %q: want %s or %s", v, api.Filesystem, api.Block)
}

// accessAbbreviations are the short forms kubectl prints.
var accessAbbreviations = map[api.KubernetesAccessMode]string{
	api.KubernetesAccessModeReadWriteOnce: "RWO", api.KubernetesAccessModeReadOnlyMany: "ROX",
	api.KubernetesAccessModeReadWriteMany: "RWX", api.KubernetesAccessModeReadWriteOncePod: "RWOP",
}

// The access modes a flag may take: a StorageClass may support any of
// them; a volume, and an environment's default for volumes, asks for one of
// the first three (ReadWriteOncePod is not part of DCM's volume contract).
var (
	classAccessModes = []api.KubernetesAccessMode{api.KubernetesAccessModeReadWriteOnce, api.KubernetesAccessModeReadOnlyMany,
		api.KubernetesAccessModeReadWriteMany, api.KubernetesAccessModeReadWriteOncePod}
	volumeAccessModes = classAccessModes[:3]
)

// accessModeFlag reads the --access-mode flag's value among allowed, as
// the tables print it (RWO, ROX, RWX, RWOP, in any case) or by its
// Kubernetes name.
func accessModeFlag(v string, allowed []api.KubernetesAccessMode) (string, error) {
	const flag = "--access-mode"
	if full, ok := fullAccessMode(v); ok && slices.Contains(allowed, api.KubernetesAccessMode(full)) {
		return full, nil
	}
	short, full := make([]string, len(allowed)), make([]string, len(allowed))
	for i, m := range allowed {
		short[i], full[i] = accessAbbreviations[m], string(m)
	}
	return "", fmt.Errorf("%s %q: want %s (or %s)", flag, v, strings.Join(short, ", "), strings.Join(full, ", "))
}

// fullAccessMode is the Kubernetes name of an access mode given either way.
func fullAccessMode(v string) (string, bool) {
	for full, short := range accessAbbreviations {
		if strings.EqualFold(v, short) || strings.EqualFold(v, string(full)) {
			return string(full), true
		}
	}
	return v, false
}

// shortAccessModes prints access modes as kubectl does.
func shortAccessModes[M ~string](modes []M) string {
	short := make([]string, len(modes))
	for i, m := range modes {
		short[i] = accessAbbreviations[api.KubernetesAccessMode(m)]
	}
	return strings.Join(short, ",")
}

// printClassMatrix writes one row per class and one column per environment;
// wide adds the provisioners.
func printClassMatrix(w io.Writer, classes []api.FleetStorageClass, now time.Time, wide bool) error {
	stale := map[string]time.Time{}
	var envs []string
	for _, c := range classes {
		for _, d := range c.Environments {
			if !slices.Contains(envs, d.EnvironmentId) {
				envs = append(envs, d.EnvironmentId)
			}
			if d.Stale {
				stale[d.EnvironmentId] = d.ObservedTime
			}
		}
	}
	slices.Sort(envs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := []string{"CLASS"}
	if wide {
		header = append(header, "PROVISIONERS")
	}
	for _, e := range envs {
		at, isStale := stale[e]
		e = cell(e)
		if isStale {
			e += fmt.Sprintf(" (stale, seen %s ago)", now.Sub(at).Round(time.Second))
		}
		header = append(header, e)
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, c := range classes {
		row := []string{cell(c.Name)}
		if wide {
			row = append(row, cell(strings.Join(c.Summary.Provisioners, ",")))
		}
		for _, e := range envs {
			row = append(row, cell(classCell(c.Environments, e)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func classCell(details []api.StorageClassDetail, env string) string {
	i := slices.IndexFunc(details, func(d api.StorageClassDetail) bool { return d.EnvironmentId == env })
	if i < 0 {
		return "-"
	}
	d := details[i]
	modes := "?"
	if d.AccessModes != nil {
		modes = shortAccessModes(*d.AccessModes)
	}
	parts := []string{modes}
	if d.AllowVolumeExpansion {
		parts = append(parts, "exp")
	}
	if d.IsDefault {
		parts = append(parts, "default")
	}
	if d.Capacity != nil {
		parts = append(parts, d.Capacity.Total)
	}
	return strings.Join(parts, " ")
}
