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

func (c *gatewayClient) adoptCommand() *cobra.Command {
	var namespace string
	var dryRun, takeOver bool
	cmd := &cobra.Command{
		Use:   "adopt ID",
		Short: "Adopt the DCM volumes another provider created in an environment (DCM's per-cluster storage SP)",
		Long: "adopt records as volumes the claims labelled for DCM storage in the environment's namespaces that no volume\n" +
			"record serves, so the gateway serves, follows and reports them; each adopted volume's status is published once.\n" +
			"Claims whose labels disagree, whose name is not a valid volume id, that another environment records, or that\n" +
			"are being deleted are skipped with the reason, and so are claims another environment or gateway installation\n" +
			"made unless --take-over (a claim taken over is labelled with the environment). Running it again adopts nothing new.",
		Example: "  storage-gateway env adopt east --dry-run\n  storage-gateway env adopt east\n" +
			"  storage-gateway env adopt east --namespace team-a\n" +
			"  storage-gateway env adopt east2 --take-over   # east registered again as east2 takes east's claims",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeEnvironments,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			body := api.AdoptionRequest{ValidateOnly: &dryRun, TakeOver: &takeOver}
			if namespace != "" {
				body.Namespace = &namespace
			}
			resp, err := client.AdoptVolumesWithResponse(cmd.Context(), args[0], body)
			if err != nil {
				return err
			}
			if resp.JSON200 == nil {
				return problemError(cmd, resp.HTTPResponse, resp.Body)
			}
			return printAdoption(cmd.OutOrStdout(), c.output, *resp.JSON200)
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "only this namespace (one of the environment's)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be adopted and what would be skipped; change nothing")
	cmd.Flags().BoolVar(&takeOver, "take-over", false, "also adopt claims another environment or storage-gateway installation made "+
		"(the former holder reports them DELETED); recorded in the audit trail")
	setsFields(cmd, "namespace", "namespace")
	setsFields(cmd, "take-over", "take_over")
	return cmd
}

// printAdoption prints an adoption: as the API answered it (json, yaml),
// the adopted volumes' names, or one row per claim it looked at (with
// what to look at in an adopted one) and a summary line.
func printAdoption(w io.Writer, format string, a api.Adoption) error {
	switch format {
	case "json", "yaml":
		return printData(w, format, a)
	case "name":
		return printItems(w, format, a.Adopted, false, volumeTable, nil)
	}
	verb := "adopted"
	if a.ValidateOnly {
		verb = "would adopt"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(a.Adopted)+len(a.Skipped) > 0 {
		fmt.Fprintln(tw, "ACTION\tNAMESPACE\tID\tSTATUS\tCAPACITY\tCLASS\tREASON")
	}
	// An adopted claim to look at carries its warnings as its reason.
	warnings := map[string][]string{}
	for _, n := range a.Warnings {
		warnings[n.Namespace+"/"+n.Name] = append(warnings[n.Namespace+"/"+n.Name], n.Reason)
	}
	for _, v := range a.Adopted {
		ns := ptr.Deref(v.Spec.Metadata.Namespace, "")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", verb, cell(ns), cell(v.Id),
			v.Status, cell(v.Spec.Capacity), cell(ptr.Deref(v.Spec.Metadata.StorageClass, "")), cell(strings.Join(warnings[ns+"/"+v.Id], "; ")))
	}
	for _, s := range a.Skipped {
		fmt.Fprintf(tw, "skip\t%s\t%s\t\t\t\t%s\n", cell(s.Namespace), cell(s.Name), cell(s.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "%s: %d %s, %d skipped, %d served already (namespaces %s)\n", a.EnvironmentId,
		len(a.Adopted), verb, len(a.Skipped), a.RecordedCount, strings.Join(a.Namespaces, ", ")); err != nil {
		return err
	}
	return printDCMInstancesWithoutClaim(w, a)
}

// printDCMInstancesWithoutClaim says which of DCM's instances of the
// provider the environment would still not serve: what a take-over of the
// name would orphan.
func printDCMInstancesWithoutClaim(w io.Writer, a api.Adoption) error {
	without := ptr.Deref(a.DcmInstancesWithoutClaim, nil)
	switch {
	case a.DcmCheck == nil && a.DcmInstancesWithoutClaim == nil:
		return nil // the gateway does not register with DCM
	case a.DcmCheck != nil:
		_, err := fmt.Fprintf(w, "DCM's instances not checked: %s\n", *a.DcmCheck)
		return err
	case len(without) == 0:
		_, err := fmt.Fprintln(w, "every DCM instance of the provider is served here or adoptable")
		return err
	}
	if _, err := fmt.Fprintf(w, "DCM holds %d instance(s) of the provider with no claim in the environment's namespaces "+
		"(a take-over would have DCM forget them; serve their namespace, then adopt):\n", len(without)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tNAME\tNAMESPACE")
	for _, in := range without {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", cell(in.Id), cell(in.Name), cell(ptr.Deref(in.Namespace, "")))
	}
	return tw.Flush()
}
