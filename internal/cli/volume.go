package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// volumeClient is a gatewayClient for one environment's volumes.
type volumeClient struct {
	gatewayClient
	environment string
}

func newVolumeCommand() *cobra.Command {
	c := &volumeClient{}
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "Create, list, expand and delete volumes (PersistentVolumeClaims) through a running gateway",
		Long: "volume calls the gateway's volume API, the one DCM uses, for the environment named by --environment\n" +
			"(-e). Each volume is a PersistentVolumeClaim named by the volume id in the environment's namespace.\n" +
			"volume list --all-environments (-A) lists every environment's volumes (admin or viewer role).",
		Example: "  storage-gateway volume create -e local-east --name data --capacity 1Gi\n" +
			"  storage-gateway volume list -e local-east\n  storage-gateway volume list -A --status FAILED",
	}
	c.registerFlags(cmd)
	cmd.AddCommand(c.createCommand(), c.listCommand(), c.getCommand(), c.expandCommand(), c.deleteCommand(), c.retierCommand(), c.snapshotCommand())
	return cmd
}

// environmentFlag adds -e/--environment, required when required is set.
func (c *volumeClient) environmentFlag(cmd *cobra.Command, required bool) {
	cmd.Flags().StringVarP(&c.environment, "environment", "e", "", "the environment's id")
	_ = cmd.RegisterFlagCompletionFunc("environment", c.completeEnvironments)
	if required {
		_ = cmd.MarkFlagRequired("environment")
	}
}

func (c *volumeClient) createCommand() *cobra.Command {
	var capacity, name, namespace, storageClass, accessMode, volumeMode, key, fromSnapshot, clone string
	var labels []string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "create [ID]",
		Short: "Create a volume; without an ID the gateway picks one",
		Long: "create asks for a PersistentVolumeClaim. With an ID (lowercase letters, digits and '-', or a UUID) the\n" +
			"volume gets that id, and creating it again with the same settings is answered with the volume. Without\n" +
			"one, the request carries an idempotency key (--idempotency-key, or a fresh random one) and the gateway\n" +
			"picks the id. Settings left out come from the environment's defaults, then the cluster's default class.",
		Example: "  storage-gateway volume create -e local-east --name data --capacity 1Gi\n" +
			"  storage-gateway volume create db-1 -e local-east --capacity 20Gi --storage-class standard --access-mode RWO\n" +
			"  storage-gateway volume create -e local-east --name scratch --capacity 5Gi --namespace dcm-scratch --label team=db",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := firstArg(args)
			if name == "" {
				name = id
			}
			if name == "" {
				return errors.New("--name is required when no volume id is given")
			}
			spec := api.StorageSpec{Capacity: capacity, ServiceType: api.StorageSpecServiceTypeStorage,
				Metadata: api.StorageMetadata{Name: name}}
			if len(labels) > 0 {
				m, err := keyValues("--label", labels)
				if err != nil {
					return err
				}
				spec.Metadata.Labels = &m
			}
			hints, err := kubernetesHints(namespace, storageClass, accessMode, volumeMode)
			if err != nil {
				return err
			}
			if fromSnapshot != "" || clone != "" {
				if hints == nil {
					hints = &api.KubernetesHints{}
				}
				hints.Source = &api.VolumeSource{Snapshot: optionalFlag(fromSnapshot), Volume: optionalFlag(clone)}
			}
			if hints != nil {
				spec.ProviderHints = &api.StorageSpec_ProviderHints{Kubernetes: hints}
			}
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			var body api.VolumeCreateBody
			params := api.CreateVolumeParams{}
			if id != "" {
				params.Id = &id
				err = body.FromVolumeCreateRequest(api.VolumeCreateRequest{Spec: spec})
			} else {
				if key == "" {
					key = uuid.NewString()
				}
				params.IdempotencyKey = &key
				err = body.FromStorageSpec(spec)
			}
			if err != nil {
				return err
			}
			resp, err := client.CreateVolumeWithResponse(cmd.Context(), c.environment, &params, body)
			if err != nil {
				return err
			}
			created := resp.JSON201
			if created == nil {
				created = resp.JSON200
			}
			if created == nil || wait == 0 {
				return c.printVolume(cmd, resp.HTTPResponse, resp.Body, created)
			}
			return c.waitRunning(cmd, client, created.Id, wait)
		},
	}
	c.environmentFlag(cmd, true)
	f := cmd.Flags()
	f.StringVar(&capacity, "capacity", "", "size as a Kubernetes quantity: 10Gi, 500Mi, 1T")
	f.StringVar(&name, "name", "", "display name (when empty: the volume id)")
	f.StringVar(&namespace, "namespace", "", "namespace of the claim (when empty: the environment's)")
	f.StringVar(&storageClass, "storage-class", "", "StorageClass (when empty: the environment's default, then the cluster's)")
	f.StringVar(&accessMode, "access-mode", "", "access mode: RWO, ROX or RWX (or ReadWriteOnce, ...); not RWOP, which DCM's volume contract lacks")
	f.StringVar(&volumeMode, "volume-mode", "", "volume mode: Filesystem or Block (in any case)")
	f.StringArrayVar(&labels, "label", nil, "label key=value copied to the claim (repeatable)")
	f.DurationVar(&wait, "wait", 0, "wait up to this long for the volume to be RUNNING (bound); FAILED ends the wait with an error")
	f.StringVar(&key, "idempotency-key", "", "key that makes a retried create without an ID safe (when empty: a fresh random one)")
	f.StringVar(&fromSnapshot, "from-snapshot", "", "restore this snapshot of the environment into the new volume (not part of DCM's contract)")
	f.StringVar(&clone, "clone", "", "fill the new volume with a copy of this volume of the environment (not part of DCM's contract)")
	cmd.MarkFlagsMutuallyExclusive("from-snapshot", "clone")
	_ = cmd.RegisterFlagCompletionFunc("storage-class", c.completeClasses)
	_ = cmd.RegisterFlagCompletionFunc("from-snapshot", c.completeSnapshots(nil))
	_ = cmd.RegisterFlagCompletionFunc("clone", c.completeVolumes)
	_ = cmd.MarkFlagRequired("capacity")
	for flag, field := range map[string][]string{
		"capacity": {"capacity", "spec.capacity"}, "name": {"metadata.name", "spec.metadata.name"},
		"label":     {"metadata.labels", "spec.metadata.labels"},
		"namespace": {"provider_hints.kubernetes.namespace", "spec.provider_hints.kubernetes.namespace"},
		"storage-class": {"provider_hints.kubernetes.storage_class", "spec.provider_hints.kubernetes.storage_class",
			"storage_class"},
		"access-mode":     {"provider_hints.kubernetes.access_mode", "spec.provider_hints.kubernetes.access_mode", "access_mode"},
		"volume-mode":     {"provider_hints.kubernetes.volume_mode", "spec.provider_hints.kubernetes.volume_mode", "volume_mode"},
		"idempotency-key": {"Idempotency-Key"},
		"environment":     {"environment_id"},
		"from-snapshot":   {"spec.provider_hints.kubernetes.source.snapshot"},
		"clone":           {"spec.provider_hints.kubernetes.source.volume"},
	} {
		setsFields(cmd, flag, field...)
	}
	argumentSets(cmd, "id", "volume id")
	return cmd
}

// waitRunning polls the volume until it is RUNNING — created, or expanded
// to its new size — and prints it; FAILED, or still not RUNNING after wait,
// is an error naming its status message.
func (c *volumeClient) waitRunning(cmd *cobra.Command, client *api.ClientWithResponses, id string, wait time.Duration) error {
	return c.poll(cmd, wait, func() (bool, error) {
		resp, err := client.GetVolumeWithResponse(cmd.Context(), c.environment, id)
		if err != nil {
			return false, err
		}
		v := resp.JSON200
		switch {
		case v == nil:
			return false, problemError(cmd, resp.HTTPResponse, resp.Body)
		case v.Status == api.VolumeStatusRUNNING:
			return true, c.printVolume(cmd, resp.HTTPResponse, resp.Body, v)
		case v.Status == api.VolumeStatusFAILED:
			return false, fmt.Errorf("volume %s FAILED: %s", id, v.StatusMessage)
		}
		return false, &notYet{kind: "volume", id: id, status: string(v.Status), message: v.StatusMessage, wait: wait}
	})
}

// waitGone polls until the gateway no longer finds what kind and id name
// (a volume, a snapshot) and says it is deleted. get reads it; while it is
// found, its status and message say what it is still doing.
func (c *volumeClient) waitGone(cmd *cobra.Command, kind, id string, wait time.Duration,
	get func(ctx context.Context) (*http.Response, error)) error {
	return c.poll(cmd, wait, func() (bool, error) {
		resp, err := get(cmd.Context())
		if err != nil {
			return false, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return false, err
		}
		var found struct {
			Status  string `json:"status"`
			Message string `json:"status_message"`
		}
		switch {
		case resp.StatusCode == http.StatusNotFound:
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s/%s deleted\n", kind, id)
			return true, err
		case resp.StatusCode != http.StatusOK || json.Unmarshal(body, &found) != nil:
			return false, problemError(cmd, resp, body)
		}
		return false, &notYet{kind: kind, id: id, status: found.Status, message: found.Message, wait: wait}
	})
}

// notYet is a volume (or snapshot: kind) that has not reached what a
// --wait waits for: the error when the wait is over.
type notYet struct {
	kind, id, status, message string
	wait                      time.Duration
}

func (e *notYet) Error() string {
	return fmt.Sprintf("%s %s is still %s after %s: %s", e.kind, e.id, e.status, e.wait, e.message)
}

// poll calls check twice a second until it is done, it fails for good
// (a FAILED volume or snapshot, a refusal), or wait has passed: then the notYet of its
// last call, which says what the volume is still doing.
func (c *volumeClient) poll(cmd *cobra.Command, wait time.Duration, check func() (done bool, err error)) error {
	deadline := time.Now().Add(wait)
	for {
		done, err := check()
		var pending *notYet
		if done || err != nil && (!errors.As(err, &pending) || time.Now().After(deadline)) {
			return err
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// optionalFlag is a flag's value, nil when it is not set.
func optionalFlag(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// kubernetesHints builds the provider hints from the flags, nil when none
// is set.
func kubernetesHints(namespace, storageClass, accessMode, volumeMode string) (*api.KubernetesHints, error) {
	if namespace == "" && storageClass == "" && accessMode == "" && volumeMode == "" {
		return nil, nil
	}
	h := &api.KubernetesHints{}
	if namespace != "" {
		h.Namespace = &namespace
	}
	if storageClass != "" {
		h.StorageClass = &storageClass
	}
	if accessMode != "" {
		mode, err := accessModeFlag(accessMode, volumeAccessModes)
		if err != nil {
			return nil, err
		}
		m := api.AccessMode(mode)
		h.AccessMode = &m
	}
	if volumeMode != "" {
		m, err := volumeModeFlag(volumeMode)
		if err != nil {
			return nil, err
		}
		h.VolumeMode = &m
	}
	return h, nil
}

func (c *volumeClient) listCommand() *cobra.Command {
	var all bool
	var status, storageClass string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List one environment's volumes, or every environment's (-A)",
		Example: "  storage-gateway volume list -e local-east\n  storage-gateway volume list -A\n" +
			"  storage-gateway volume list -A --status PROVISIONING --storage-class standard -o wide",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case all == (c.environment != ""):
				return errors.New("give either --environment ID or --all-environments")
			case !all && (status != "" || storageClass != ""):
				return errors.New("--status and --storage-class filter the fleet list: use them with --all-environments")
			}
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			var volumes []api.Volume
			if all {
				params := api.ListFleetVolumesParams{}
				if status != "" {
					s := api.VolumeStatus(strings.ToUpper(status))
					params.Status = &s
				}
				if storageClass != "" {
					params.StorageClass = &storageClass
				}
				volumes, err = allPages(func(token *string) ([]api.Volume, *string, error) {
					params.PageToken = token
					resp, err := client.ListFleetVolumesWithResponse(cmd.Context(), &params)
					if err != nil {
						return nil, nil, err
					}
					if resp.JSON200 == nil {
						return nil, nil, problemError(cmd, resp.HTTPResponse, resp.Body)
					}
					return resp.JSON200.Volumes, resp.JSON200.NextPageToken, nil
				})
			} else {
				params := api.ListVolumesParams{}
				volumes, err = allPages(func(token *string) ([]api.Volume, *string, error) {
					params.PageToken = token
					resp, err := client.ListVolumesWithResponse(cmd.Context(), c.environment, &params)
					if err != nil {
						return nil, nil, err
					}
					if resp.JSON200 == nil {
						return nil, nil, problemError(cmd, resp.HTTPResponse, resp.Body)
					}
					return resp.JSON200.Volumes, resp.JSON200.NextPageToken, nil
				})
			}
			if err != nil {
				return err
			}
			return printItems(cmd.OutOrStdout(), c.output, volumes, false, volumeTable, nil)
		},
	}
	c.environmentFlag(cmd, false)
	cmd.Flags().BoolVarP(&all, "all-environments", "A", false, "list the volumes of every environment")
	cmd.Flags().StringVar(&status, "status", "", "only this status: PROVISIONING, RUNNING, FAILED, DELETING or DELETED (with -A)")
	cmd.Flags().StringVar(&storageClass, "storage-class", "", "only volumes of this StorageClass (with -A)")
	setsFields(cmd, "status", "status")
	setsFields(cmd, "storage-class", "storage_class")
	setsFields(cmd, "environment", "environment_id", "environment")
	return cmd
}

func (c *volumeClient) getCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "get ID",
		Short:             "Show one volume",
		Example:           "  storage-gateway volume get db-1 -e local-east\n  storage-gateway volume get db-1 -e local-east -o yaml",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeVolumeArgument,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.GetVolumeWithResponse(cmd.Context(), c.environment, args[0])
			if err != nil {
				return err
			}
			return c.printVolume(cmd, resp.HTTPResponse, resp.Body, resp.JSON200)
		},
	}
	c.environmentFlag(cmd, true)
	setsFields(cmd, "environment", "environment_id")
	return cmd
}

func (c *volumeClient) expandCommand() *cobra.Command {
	var capacity string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "expand ID --capacity SIZE",
		Short: "Grow a volume (its class must allow expansion; volumes never shrink)",
		Example: "  storage-gateway volume expand db-1 -e local-east --capacity 40Gi\n" +
			"  storage-gateway volume expand db-1 -e local-east --capacity 40Gi --wait 2m",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeVolumeArgument,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.UpdateVolumeWithApplicationMergePatchPlusJSONBodyWithResponse(cmd.Context(), c.environment, args[0],
				api.VolumeUpdate{Capacity: capacity})
			if err != nil {
				return err
			}
			if resp.JSON200 == nil || wait == 0 {
				return c.printVolume(cmd, resp.HTTPResponse, resp.Body, resp.JSON200)
			}
			return c.waitRunning(cmd, client, args[0], wait)
		},
	}
	c.environmentFlag(cmd, true)
	cmd.Flags().StringVar(&capacity, "capacity", "", "the new size, larger than the current one: 40Gi")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the expansion to finish (RUNNING at the new size); "+
		"a file system that grows only when mounted keeps it PROVISIONING")
	_ = cmd.MarkFlagRequired("capacity")
	setsFields(cmd, "capacity", "capacity")
	setsFields(cmd, "environment", "environment_id")
	return cmd
}

func (c *volumeClient) retierCommand() *cobra.Command {
	var class string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "retier ID --class TIER",
		Short: "Move a volume to another performance tier, a VolumeAttributesClass of its driver (not part of DCM's contract)",
		Example: "  storage-gateway volume retier db-1 -e local-east --class gold\n" +
			"  storage-gateway volume retier db-1 -e local-east --class gold --wait 1m",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeVolumeArgument,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.RetierVolumeWithResponse(cmd.Context(), c.environment, args[0], api.VolumeRetier{Tier: class})
			if err != nil {
				return err
			}
			if resp.JSON200 == nil || wait == 0 {
				return c.printVolume(cmd, resp.HTTPResponse, resp.Body, resp.JSON200)
			}
			return c.poll(cmd, wait, func() (bool, error) {
				got, err := client.GetVolumeWithResponse(cmd.Context(), c.environment, args[0])
				if err != nil {
					return false, err
				}
				v := got.JSON200
				switch {
				case v == nil:
					return false, problemError(cmd, got.HTTPResponse, got.Body)
				case v.Tier == nil || v.Tier.Requested != class:
					return false, fmt.Errorf("volume %s no longer asks for tier %s", args[0], class)
				case v.Tier.Status == nil:
					return true, c.printVolume(cmd, got.HTTPResponse, got.Body, v)
				case *v.Tier.Status == api.VolumeTierStatusINFEASIBLE:
					return false, fmt.Errorf("volume %s cannot move to tier %s: %s", args[0], class, ptr.Deref(v.Tier.Message, "the driver refused"))
				}
				return false, &notYet{kind: "volume", id: args[0], status: "moving to tier " + class, message: string(*v.Tier.Status), wait: wait}
			})
		},
	}
	c.environmentFlag(cmd, true)
	cmd.Flags().StringVar(&class, "class", "", "the VolumeAttributesClass: classes lists each class's tiers")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the volume to be on the tier; a refusal ends the wait with its reason")
	_ = cmd.MarkFlagRequired("class")
	_ = cmd.RegisterFlagCompletionFunc("class", c.completeTiers)
	setsFields(cmd, "class", "tier")
	setsFields(cmd, "environment", "environment_id")
	return cmd
}

func (c *volumeClient) deleteCommand() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:               "delete ID",
		Aliases:           []string{"rm"},
		Short:             "Delete a volume: its PersistentVolumeClaim is deleted",
		Example:           "  storage-gateway volume delete db-1 -e local-east\n  storage-gateway volume delete db-1 -e local-east --wait 1m",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.completeVolumeArgument,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := client.DeleteVolumeWithResponse(cmd.Context(), c.environment, args[0])
			if err != nil {
				return err
			}
			if resp.StatusCode() != http.StatusNoContent {
				return problemError(cmd, resp.HTTPResponse, resp.Body)
			}
			if wait > 0 {
				return c.waitGone(cmd, "volume", args[0], wait, func(ctx context.Context) (*http.Response, error) {
					return client.GetVolume(ctx, c.environment, args[0])
				})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "volume/%s deleted\n", args[0])
			return err
		},
	}
	c.environmentFlag(cmd, true)
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the claim to be gone (finalizers done)")
	setsFields(cmd, "environment", "environment_id")
	return cmd
}

// printVolume prints the volume the gateway answered with, or its problem.
func (c *volumeClient) printVolume(cmd *cobra.Command, resp *http.Response, body []byte, v *api.Volume) error {
	return printAnswer(cmd, c.output, resp, body, v, volumeTable, describeVolume)
}

// volumeTable is how volumes print as rows.
var volumeTable = table[api.Volume]{
	kind: "volume",
	// A volume id is unique within its environment only.
	name: func(v api.Volume) string { return v.EnvironmentId + "/" + v.Id },
	columns: []column[api.Volume]{
		{header: "ENVIRONMENT", value: func(v api.Volume) string { return v.EnvironmentId }},
		{header: "ID", value: func(v api.Volume) string { return v.Id }},
		{header: "NAME", value: func(v api.Volume) string { return v.Spec.Metadata.Name }},
		{header: "STATUS", value: func(v api.Volume) string { return string(v.Status) }},
		{header: "CAPACITY", value: func(v api.Volume) string { return v.Spec.Capacity }},
		{header: "CLASS", value: func(v api.Volume) string { return ptr.Deref(v.Spec.Metadata.StorageClass, "") }},
		{header: "NAMESPACE", value: func(v api.Volume) string { return ptr.Deref(v.Spec.Metadata.Namespace, "") }},
		{header: "ACCESS", wide: true, value: func(v api.Volume) string { return volumeAccessMode(v) }},
		{header: "BOUND TO", wide: true, value: func(v api.Volume) string { return ptr.Deref(v.Spec.Metadata.VolumeName, "") }},
		{header: "LABELS", wide: true, value: func(v api.Volume) string { return volumeLabels(v) }},
		{header: "AGE", wide: true, value: func(v api.Volume) string { return age(v.CreateTime) }},
		{header: "MESSAGE", value: func(v api.Volume) string { return v.StatusMessage }},
	},
}

// describeVolume is the detailed view of one volume.
func describeVolume(w io.Writer, v api.Volume) error {
	d := newDetails(w)
	d.add("ID", v.Id)
	d.add("Environment", v.EnvironmentId)
	d.add("Name", v.Spec.Metadata.Name)
	d.add("Status", string(v.Status))
	d.add("Message", v.StatusMessage)
	d.add("Capacity", v.Spec.Capacity)
	d.add("Namespace", ptr.Deref(v.Spec.Metadata.Namespace, ""))
	d.add("Storage class", ptr.Deref(v.Spec.Metadata.StorageClass, ""))
	d.add("Access mode", volumeAccessMode(v))
	if h := hintsOf(v); h != nil && h.VolumeMode != nil {
		d.add("Volume mode", string(*h.VolumeMode))
	}
	d.add("Bound to", ptr.Deref(v.Spec.Metadata.VolumeName, ""))
	if t := v.Tier; t != nil {
		d.add("Tier", ptr.Deref(t.Current, ""))
		if t.Status != nil {
			d.add("Tier change", fmt.Sprintf("to %s: %s %s", t.Requested, *t.Status, ptr.Deref(t.Message, "")))
		}
	}
	d.add("Labels", volumeLabels(v))
	d.add("Path", v.Path)
	d.add("Created", v.CreateTime.Local().Format(time.RFC3339))
	d.add("Updated", v.UpdateTime.Local().Format(time.RFC3339))
	return d.flush()
}

func hintsOf(v api.Volume) *api.KubernetesHints {
	if v.Spec.ProviderHints == nil {
		return nil
	}
	return v.Spec.ProviderHints.Kubernetes
}

func volumeAccessMode(v api.Volume) string {
	if h := hintsOf(v); h != nil && h.AccessMode != nil {
		return shortAccessModes([]api.AccessMode{*h.AccessMode})
	}
	return ""
}

func volumeLabels(v api.Volume) string {
	if v.Spec.Metadata.Labels == nil {
		return ""
	}
	return joinLabels(*v.Spec.Metadata.Labels)
}

// age is how long ago t was, as kubectl prints it: the two largest units.
func age(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours())/24)
}
