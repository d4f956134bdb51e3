package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// newPlaceCommand asks the gateway where a volume can go.
func newPlaceCommand() *cobra.Command {
	c := &gatewayClient{}
	var params api.ListPlacementsParams
	var accessMode, volumeMode, region, zone string
	var expandable, snapshots, explain bool
	cmd := &cobra.Command{
		Use:   "place --capacity SIZE",
		Short: "Rank the environments and StorageClasses that can take a volume",
		Long: "place asks a running gateway which READY environments and StorageClasses can take a volume of this size\n" +
			"and these modes, best first. CAPACITY is the published capacity segment it fits best in (? when none is\n" +
			"published), QUOTA the room the default namespace's quotas leave (- when none limits it, ? when the gateway\n" +
			"may not read them); MODES shows ? where the class's modes are unknown. --explain also lists what was left out and why.",
		Example: "  storage-gateway place --capacity 100Gi --access-mode RWX\n" +
			"  storage-gateway place --capacity 10Gi --volume-mode Block --region eu-1 --expandable --explain\n" +
			"  storage-gateway place --capacity 10Gi --snapshots",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			if params.AccessMode, params.VolumeMode, err = modeFilters(accessMode, volumeMode); err != nil {
				return err
			}
			setStrings(map[**string]string{&params.Region: region, &params.Zone: zone})
			if expandable {
				params.Expandable = &expandable
			}
			if snapshots {
				params.Snapshots = &snapshots
			}
			if explain {
				params.Explain = &explain
			}
			resp, err := client.ListPlacementsWithResponse(cmd.Context(), &params)
			if err != nil {
				return err
			}
			if resp.JSON200 == nil {
				return problemError(cmd, resp.HTTPResponse, resp.Body)
			}
			return printPlacement(cmd.OutOrStdout(), c.output, *resp.JSON200)
		},
	}
	c.registerFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&params.Capacity, "capacity", "", "the volume's size, e.g. 100Gi (required)")
	f.StringVar(&accessMode, "access-mode", "", "access mode: RWO, ROX, RWX or RWOP (or ReadWriteOnce, ...)")
	f.StringVar(&volumeMode, "volume-mode", "", "volume mode: Filesystem or Block")
	f.StringVar(&region, "region", "", "only environments in this region")
	f.StringVar(&zone, "zone", "", "only environments in this zone")
	f.BoolVar(&expandable, "expandable", false, "only classes that allow expansion")
	f.BoolVar(&snapshots, "snapshots", false, "only classes whose volumes can be snapshotted (where that is unknown: ranked after)")
	f.BoolVar(&explain, "explain", false, "also list what was left out, and why")
	_ = cmd.MarkFlagRequired("capacity")
	for flag, field := range map[string]string{
		"capacity": "capacity", "access-mode": "access_mode", "volume-mode": "volume_mode", "region": "region", "zone": "zone",
		"expandable": "expandable", "snapshots": "snapshots",
	} {
		setsFields(cmd, flag, field)
	}
	return cmd
}

// printPlacement prints a placement: as the API answered it (json, yaml),
// environment/class names, or the ranking and, if explained, what was left
// out.
func printPlacement(w io.Writer, format string, p api.Placement) error {
	switch format {
	case "json", "yaml":
		return printData(w, format, p)
	case "name":
		for _, c := range p.Candidates {
			if _, err := fmt.Fprintf(w, "placement/%s/%s\n", cell(c.EnvironmentId), cell(c.StorageClass)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	wide := format == "wide"
	header := "RANK\tENVIRONMENT\tCLASS\tREGION\tZONE\tMODES\tCAPACITY\tQUOTA"
	if wide {
		header += "\tPROVISIONER\tEXPANDABLE\tBINDING"
	}
	fmt.Fprintln(tw, header)
	for _, c := range p.Candidates {
		modes := "?"
		if c.AccessModes != nil {
			modes = shortAccessModes(*c.AccessModes)
			if !c.CapabilityKnown {
				modes += " (?)" // a requested volume mode is unknown
			}
		}
		capacity := "?"
		if c.Capacity != nil {
			capacity = c.Capacity.Capacity
			if c.Capacity.Topology != "" {
				capacity += " on " + c.Capacity.Topology
			}
		}
		quota := "-"
		switch {
		case !c.QuotaKnown:
			quota = "?"
		case c.Quota != nil:
			quota = c.Quota.Headroom + " in " + c.Quota.Namespace
		}
		row := []string{fmt.Sprint(c.Rank), c.EnvironmentId, c.StorageClass, c.Region, c.Zone, modes, capacity, quota}
		if wide {
			row = append(row, c.Provisioner, fmt.Sprint(c.AllowVolumeExpansion), c.VolumeBindingMode)
		}
		for i := range row {
			row[i] = cell(row[i])
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.Excluded == nil {
		return nil
	}
	fmt.Fprintf(w, "\nleft out (%d):\n", len(*p.Excluded))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range *p.Excluded {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", cell(e.EnvironmentId), cell(ptr.Deref(e.StorageClass, "*")), cell(e.Reason))
	}
	return tw.Flush()
}
