package cli

import (
	"cmp"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// completionPage is how many items a completion asks the gateway for: one
// page, never a walk over a large environment.
const completionPage = 1000

// noCompletion is the answer when the gateway cannot be asked: nothing,
// and no file names either.
func noCompletion() ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// volumes lists the first page of the environment's volumes (-e), nil when
// it cannot.
func (c *volumeClient) volumes(cmd *cobra.Command) []api.Volume {
	if c.environment == "" {
		return nil
	}
	client, err := c.client(cmd.Context())
	if err != nil {
		return nil
	}
	size := completionPage
	resp, err := client.ListVolumesWithResponse(cmd.Context(), c.environment, &api.ListVolumesParams{MaxPageSize: &size})
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	return resp.JSON200.Volumes
}

// completeVolumes offers the volume ids of the environment named by -e,
// each with its status, for a flag that names a volume.
func (c *volumeClient) completeVolumes(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var ids []cobra.Completion
	for _, v := range c.volumes(cmd) {
		ids = append(ids, cobra.CompletionWithDesc(v.Id, string(v.Status)))
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// completeVolumeArgument is completeVolumes for a command's one ID
// argument: nothing once it is given.
func (c *volumeClient) completeVolumeArgument(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return noCompletion()
	}
	return c.completeVolumes(cmd, nil, toComplete)
}

// completeSnapshots offers snapshot ids of the environment named by -e:
// the volume's named by volume when it is set (the snapshot commands'
// --volume), every volume's otherwise (volume create --from-snapshot).
func (c *volumeClient) completeSnapshots(volume *string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if c.environment == "" {
			return noCompletion()
		}
		client, err := c.client(cmd.Context())
		if err != nil {
			return noCompletion()
		}
		var of []string
		if volume != nil && *volume != "" {
			of = []string{*volume}
		} else {
			for _, v := range c.volumes(cmd) {
				of = append(of, v.Id)
			}
		}
		size := completionPage
		var ids []cobra.Completion
		for _, vol := range of {
			resp, err := client.ListSnapshotsWithResponse(cmd.Context(), c.environment, vol, &api.ListSnapshotsParams{MaxPageSize: &size})
			if err != nil || resp.JSON200 == nil {
				continue
			}
			for _, s := range resp.JSON200.Snapshots {
				ids = append(ids, cobra.CompletionWithDesc(s.Id, string(s.Status)+" of "+vol))
			}
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeSnapshotArgument is completeSnapshots for a command's one ID
// argument: nothing once it is given.
func (c *volumeClient) completeSnapshotArgument(volume *string) cobra.CompletionFunc {
	snapshots := c.completeSnapshots(volume)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return noCompletion()
		}
		return snapshots(cmd, args, toComplete)
	}
}

// classes lists the storage classes of the environment named by -e, nil
// when it cannot.
func (c *volumeClient) classes(cmd *cobra.Command) []api.StorageClassDetail {
	if c.environment == "" {
		return nil
	}
	client, err := c.client(cmd.Context())
	if err != nil {
		return nil
	}
	resp, err := client.ListEnvironmentStorageClassesWithResponse(cmd.Context(), c.environment)
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	return resp.JSON200.StorageClasses
}

// completeClasses offers the StorageClasses of the environment named by
// -e, each with its provisioner.
func (c *volumeClient) completeClasses(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var names []cobra.Completion
	for _, class := range c.classes(cmd) {
		names = append(names, cobra.CompletionWithDesc(class.Name, class.Provisioner))
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// completeTiers offers the performance tiers of the volume the command's
// argument names (those of its class), or of every class of the
// environment before it is named.
func (c *volumeClient) completeTiers(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	class := ""
	if len(args) > 0 {
		for _, v := range c.volumes(cmd) {
			if v.Id == args[0] {
				class = ptr.Deref(v.Spec.Metadata.StorageClass, "")
			}
		}
	}
	var tiers []string
	for _, sc := range c.classes(cmd) {
		if class == "" || sc.Name == class {
			tiers = append(tiers, ptr.Deref(sc.Tiers, nil)...)
		}
	}
	slices.Sort(tiers)
	var out []cobra.Completion
	for _, t := range slices.Compact(tiers) {
		out = append(out, cobra.CompletionWithDesc(t, cmp.Or(class, "a tier of the environment")))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
