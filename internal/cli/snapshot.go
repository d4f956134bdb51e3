package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// snapshotCommand is `volume snapshot`: the snapshots of one volume, an
// extension beside DCM's volume contract.
func (c *volumeClient) snapshotCommand() *cobra.Command {
	var volume string
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots"},
		Short:   "Snapshot a volume; list, show and delete its snapshots (not part of DCM's contract)",
		Long: "snapshot calls the gateway's snapshot API for the volume named by --volume in the environment named by\n" +
			"--environment. A snapshot is a VolumeSnapshot named by the snapshot id in the volume's namespace; the\n" +
			"cluster's snapshot controller and the CSI driver cut it (classes --snapshots lists the classes that can).",
		Example: "  storage-gateway volume snapshot create nightly-1 -e local-east --volume db-1 --class snapshots --wait 1m\n" +
			"  storage-gateway volume snapshot list -e local-east --volume db-1",
	}
	volumeFlag := func(cmd *cobra.Command) {
		c.environmentFlag(cmd, true)
		cmd.Flags().StringVar(&volume, "volume", "", "the volume's id")
		_ = cmd.MarkFlagRequired("volume")
		_ = cmd.RegisterFlagCompletionFunc("volume", c.completeVolumes)
		setsFields(cmd, "environment", "environment_id")
		setsFields(cmd, "volume", "volume_id")
	}
	for _, sub := range []*cobra.Command{c.snapshotCreate(&volume), c.snapshotList(&volume), c.snapshotGet(&volume), c.snapshotDelete(&volume)} {
		volumeFlag(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}

func (c *volumeClient) snapshotCreate(volume *string) *cobra.Command {
	var class, key string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "create [ID]",
		Short: "Snapshot a volume; without an ID the gateway picks one",
		Long: "create asks for a VolumeSnapshot of the volume's claim; the volume must be RUNNING. Without --class, the\n" +
			"default VolumeSnapshotClass of the volume's CSI driver is used. With an ID, creating it again is answered\n" +
			"with the snapshot; without one, the request carries an idempotency key and the gateway picks the id.",
		Example: "  storage-gateway volume snapshot create nightly-1 -e local-east --volume db-1 --class snapshots\n" +
			"  storage-gateway volume snapshot create -e local-west --volume db-2 --wait 1m",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			params := api.CreateSnapshotParams{}
			if id := firstArg(args); id != "" {
				params.Id = &id
			} else {
				if key == "" {
					key = uuid.NewString()
				}
				params.IdempotencyKey = &key
			}
			body := api.SnapshotCreate{}
			if class != "" {
				body.SnapshotClass = &class
			}
			resp, err := client.CreateSnapshotWithResponse(cmd.Context(), c.environment, *volume, &params, body)
			if err != nil {
				return err
			}
			created := resp.JSON201
			if created == nil {
				created = resp.JSON200
			}
			if created == nil || wait == 0 {
				return c.printSnapshot(cmd, resp.HTTPResponse, resp.Body, created)
			}
			return c.waitReady(cmd, client, *volume, created.Id, wait)
		},
	}
	f := cmd.Flags()
	f.StringVar(&class, "class", "", "VolumeSnapshotClass (when empty: the default class of the volume's driver)")
	f.StringVar(&key, "idempotency-key", "", "key that makes a retried create without an ID safe (when empty: a fresh random one)")
	f.DurationVar(&wait, "wait", 0, "wait up to this long for the snapshot to be READY; FAILED ends the wait with an error")
	setsFields(cmd, "class", "snapshot_class")
	setsFields(cmd, "idempotency-key", "Idempotency-Key")
	argumentSets(cmd, "id", "snapshot id")
	return cmd
}

// waitReady polls the snapshot until it is READY and prints it; FAILED,
// or not READY after wait, is an error naming its status message.
func (c *volumeClient) waitReady(cmd *cobra.Command, client *api.ClientWithResponses, volume, id string, wait time.Duration) error {
	return c.poll(cmd, wait, func() (bool, error) {
		resp, err := client.GetSnapshotWithResponse(cmd.Context(), c.environment, volume, id)
		if err != nil {
			return false, err
		}
		s := resp.JSON200
		switch {
		case s == nil:
			return false, problemError(cmd, resp.HTTPResponse, resp.Body)
		case s.Status == api.SnapshotStatusREADY:
			return true, c.printSnapshot(cmd, resp.HTTPResponse, resp.Body, s)
		case s.Status == api.SnapshotStatusFAILED:
			return false, fmt.Errorf("snapshot %s FAILED: %s", id, s.StatusMessage)
		}
		return false, &notYet{kind: "snapshot", id: id, status: string(s.Status), message: s.StatusMessage, wait: wait}
	})
}

func (c *volumeClient) snapshotList(volume *string) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List a volume's snapshots (also those of a volume deleted since)",
		Example: "  storage-gateway volume snapshot list -e local-east --volume db-1 -o wide",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			params := api.ListSnapshotsParams{}
			snaps, err := allPages(func(token *string) ([]api.Snapshot, *string, error) {
				params.PageToken = token
				resp, err := client.ListSnapshotsWithResponse(cmd.Context(), c.environment, *volume, &params)
				if err != nil {
					return nil, nil, err
				}
				if resp.JSON200 == nil {
					return nil, nil, problemError(cmd, resp.HTTPResponse, resp.Body)
				}
				return resp.JSON200.Snapshots, resp.JSON200.NextPageToken, nil
			})
			if err != nil {
				return err
			}
			return printItems(cmd.OutOrStdout(), c.output, snaps, false, snapshotTable, nil)
		},
	}
}

func (c *volumeClient) snapshotGet(volume *string) *cobra.Command {
	return &cobra.Command{
		Use:               "get ID",
		Short:             "Show one snapshot",
		Example:           "  storage-gateway volume snapshot get nightly-1 -e local-east --volume db-1",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeSnapshotArgument(volume),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.GetSnapshotWithResponse(cmd.Context(), c.environment, *volume, args[0])
			if err != nil {
				return err
			}
			return c.printSnapshot(cmd, resp.HTTPResponse, resp.Body, resp.JSON200)
		},
	}
}

func (c *volumeClient) snapshotDelete(volume *string) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:               "delete ID",
		Aliases:           []string{"rm"},
		Short:             "Delete a snapshot: its VolumeSnapshot is deleted (the driver's copy as its class's deletion policy says)",
		Example:           "  storage-gateway volume snapshot delete nightly-1 -e local-east --volume db-1 --wait 1m",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeSnapshotArgument(volume),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.DeleteSnapshotWithResponse(cmd.Context(), c.environment, *volume, args[0])
			if err != nil {
				return err
			}
			if resp.StatusCode() != http.StatusNoContent {
				return problemError(cmd, resp.HTTPResponse, resp.Body)
			}
			if wait > 0 {
				return c.waitGone(cmd, "snapshot", args[0], wait, func(ctx context.Context) (*http.Response, error) {
					return client.GetSnapshot(ctx, c.environment, *volume, args[0])
				})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "snapshot/%s deleted\n", args[0])
			return err
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the VolumeSnapshot to be gone")
	return cmd
}

// printSnapshot prints the snapshot the gateway answered with, or its problem.
func (c *volumeClient) printSnapshot(cmd *cobra.Command, resp *http.Response, body []byte, s *api.Snapshot) error {
	return printAnswer(cmd, c.output, resp, body, s, snapshotTable, describeSnapshot)
}

// snapshotTable is how snapshots print as rows.
var snapshotTable = table[api.Snapshot]{
	kind: "snapshot",
	name: func(s api.Snapshot) string { return s.EnvironmentId + "/" + s.Id },
	columns: []column[api.Snapshot]{
		{header: "ENVIRONMENT", wide: true, value: func(s api.Snapshot) string { return s.EnvironmentId }},
		{header: "ID", value: func(s api.Snapshot) string { return s.Id }},
		{header: "VOLUME", value: func(s api.Snapshot) string { return s.VolumeId }},
		{header: "STATUS", value: func(s api.Snapshot) string { return string(s.Status) }},
		{header: "RESTORE SIZE", value: func(s api.Snapshot) string { return ptr.Deref(s.RestoreSize, "") }},
		{header: "CLASS", value: func(s api.Snapshot) string { return ptr.Deref(s.SnapshotClass, "") }},
		{header: "NAMESPACE", wide: true, value: func(s api.Snapshot) string { return s.Namespace }},
		{header: "AGE", wide: true, value: func(s api.Snapshot) string { return age(s.CreateTime) }},
		{header: "MESSAGE", value: func(s api.Snapshot) string { return s.StatusMessage }},
	},
}

// describeSnapshot is the detailed view of one snapshot.
func describeSnapshot(w io.Writer, s api.Snapshot) error {
	d := newDetails(w)
	d.add("ID", s.Id)
	d.add("Environment", s.EnvironmentId)
	d.add("Volume", s.VolumeId)
	d.add("Status", string(s.Status))
	d.add("Message", s.StatusMessage)
	d.add("Restore size", ptr.Deref(s.RestoreSize, ""))
	d.add("Snapshot class", ptr.Deref(s.SnapshotClass, ""))
	d.add("Namespace", s.Namespace)
	d.add("Path", s.Path)
	d.add("Created", s.CreateTime.Local().Format(time.RFC3339))
	d.add("Updated", s.UpdateTime.Local().Format(time.RFC3339))
	return d.flush()
}
