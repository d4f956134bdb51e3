package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/version"
)

func newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "version",
		Example: "  storage-gateway version\n  storage-gateway version --json\n  storage-gateway --version",
		Short:   "Print the gateway's version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(version.Get())
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// versionLine is what `version` and `--version` print: the version, the
// commit when the build recorded one, and the Go release.
func versionLine() string {
	info := version.Get()
	if info.Commit == "" {
		return fmt.Sprintf("storage-gateway %s (%s)", info.Version, info.GoVersion)
	}
	return fmt.Sprintf("storage-gateway %s (commit %s, %s)", info.Version, info.Commit, info.GoVersion)
}
