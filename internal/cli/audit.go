package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/api"
)

// newAuditCommand prints the audit trail (admin role).
func newAuditCommand() *cobra.Command {
	c := &gatewayClient{}
	var params api.ListAuditEventsParams
	var subject, environment, action, since, until string
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the audit trail: who changed what, newest first",
		Long: "audit asks a running gateway (SG_GATEWAY_URL) for its audit events: every admin action and\n" +
			"volume mutation, with who (subject, roles, how authenticated), the operation, environment,\n" +
			"volume, HTTP status, TCP peer and request id. --since and --until take a duration back from\n" +
			"now (24h) or a time (2026-11-23T10:00:00Z).",
		Example: "  storage-gateway audit --since 24h\n  storage-gateway audit --environment east --action deleteEnvironment -o wide\n" +
			"  storage-gateway audit --subject alice --since 2026-11-23T10:00:00Z -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if action != "" {
				actions, err := api.AuditedActions()
				if err != nil {
					return err
				}
				if !slices.Contains(actions, action) {
					return fmt.Errorf("--action %q is not an audited operation; one of: %s", action, strings.Join(actions, ", "))
				}
			}
			now := time.Now()
			for _, f := range []struct {
				name, value string
				dst         **time.Time
			}{{"since", since, &params.StartTime}, {"until", until, &params.EndTime}} {
				if f.value == "" {
					continue
				}
				t, err := timeFlag(f.value, now)
				if err != nil {
					return fmt.Errorf("--%s: %w", f.name, err)
				}
				*f.dst = &t
			}
			for _, f := range []struct {
				value string
				dst   **string
			}{{subject, &params.Subject}, {environment, &params.Environment}, {action, &params.Action}} {
				if f.value != "" {
					v := f.value
					*f.dst = &v
				}
			}
			if limit < 1 {
				return errors.New("--limit must be at least 1")
			}
			client, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			var events []api.AuditEvent
			for {
				resp, err := client.ListAuditEventsWithResponse(cmd.Context(), &params)
				if err != nil {
					return err
				}
				if resp.JSON200 == nil {
					return problemError(cmd, resp.HTTPResponse, resp.Body)
				}
				events = append(events, resp.JSON200.AuditEvents...)
				if len(events) >= limit || resp.JSON200.NextPageToken == nil {
					break
				}
				params.PageToken = resp.JSON200.NextPageToken
			}
			if len(events) > limit {
				events = events[:limit]
			}
			return printItems(cmd.OutOrStdout(), c.output, events, false, auditTable, nil)
		},
	}
	c.registerFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&subject, "subject", "", "only events of this subject")
	f.StringVar(&environment, "environment", "", "only events of this environment")
	f.StringVar(&action, "action", "", "only this operation, e.g. deleteEnvironment")
	f.StringVar(&since, "since", "", "only events at or after this (duration back from now, or RFC 3339 time)")
	f.StringVar(&until, "until", "", "only events before this (duration back from now, or RFC 3339 time)")
	f.IntVar(&limit, "limit", 100, "at most this many events")
	for flag, field := range map[string]string{
		"subject": "subject", "environment": "environment", "action": "action", "since": "start_time", "until": "end_time",
	} {
		setsFields(cmd, flag, field)
	}
	return cmd
}

// timeFlag reads "24h" (that long before now) or an RFC 3339 time. A
// negative duration would be a time to come, where no event is yet.
func timeFlag(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("must be a duration back from now (24h), not a negative one")
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errors.New("must be a duration (24h) or an RFC 3339 time (2026-11-23T10:00:00Z)")
	}
	return t, nil
}

// auditTable is how audit events print as rows.
var auditTable = table[api.AuditEvent]{
	kind: "auditevent",
	name: func(e api.AuditEvent) string { return e.Id },
	columns: []column[api.AuditEvent]{
		{header: "TIME", value: func(e api.AuditEvent) string { return e.Time.Local().Format(time.RFC3339) }},
		{header: "SUBJECT", value: func(e api.AuditEvent) string { return e.Subject }},
		{header: "SUBJECT NAME", wide: true, value: func(e api.AuditEvent) string { return e.Name }},
		{header: "ROLES", value: func(e api.AuditEvent) string { return joinNames(e.Roles, ",") }},
		{header: "METHOD", value: func(e api.AuditEvent) string { return string(e.AuthMethod) }},
		{header: "ACTION", value: func(e api.AuditEvent) string { return e.Action }},
		{header: "ENVIRONMENT", value: func(e api.AuditEvent) string { return ptr.Deref(e.EnvironmentId, "") }},
		{header: "VOLUME", value: func(e api.AuditEvent) string { return ptr.Deref(e.VolumeId, "") }},
		{header: "STATUS", value: func(e api.AuditEvent) string { return strconv.Itoa(e.Status) }},
		{header: "PEER", value: func(e api.AuditEvent) string { return e.Peer }},
		{header: "REQUEST", value: func(e api.AuditEvent) string { return e.RequestId }},
		{header: "ID", wide: true, value: func(e api.AuditEvent) string { return e.Id }},
	},
}
