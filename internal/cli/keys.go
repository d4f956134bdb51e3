package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// newKeysCommand groups key-ring maintenance. Rotation is: keys add NEW →
// SIGHUP the gateways → keys promote NEW → SIGHUP → keys rewrap → keys retire OLD.
func newKeysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "keys",
		Example: "  storage-gateway keys init --file /etc/storage-gateway/keys.json\n  storage-gateway keys list",
		Short:   "Manage the key ring that seals cluster credentials",
		Long: "keys manages the key ring file (SG_KEY_RING_FILE, or --file). Running gateways re-read it\n" +
			"on SIGHUP. To rotate: keys add k2, SIGHUP the gateways, keys promote k2, SIGHUP them again,\n" +
			"keys rewrap, keys retire k1.",
	}
	path := fileFlag(cmd, "SG_KEY_RING_FILE", "key ring file")
	cmd.AddCommand(
		newKeysInitCommand(path),
		newKeysAddCommand(path),
		newKeysPromoteCommand(path),
		newKeysListCommand(path),
		newKeysRewrapCommand(path),
		newKeysRetireCommand(path),
	)
	return cmd
}

func newKeysInitCommand(path func() (string, error)) *cobra.Command {
	var id string
	var ifMissing bool
	cmd := &cobra.Command{
		Use:     "init",
		Example: "  storage-gateway keys init --file /etc/storage-gateway/keys.json\n  storage-gateway keys init --if-missing",
		Short:   "Create a key ring file with one fresh primary key (mode 0600)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := path()
			if err != nil {
				return err
			}
			if _, err := os.Stat(p); err == nil {
				if ifMissing {
					return nil
				}
				return fmt.Errorf("%s exists; refusing to overwrite a key ring", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			ring, err := secrets.NewKeyRing(id)
			if err != nil {
				return err
			}
			if err := ring.WriteFile(p); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "created key ring %s with primary key %s\n", p, id)
			return err
		},
	}
	cmd.Flags().StringVar(&id, "id", "k1", "id of the first key")
	cmd.Flags().BoolVar(&ifMissing, "if-missing", false, "do nothing when the file exists")
	return cmd
}

// fileFlag adds --file (envVar sets its default) to cmd's subcommands and returns
// what they call for the path: an error saying how to name the file when
// neither is set.
func fileFlag(cmd *cobra.Command, envVar, what string) func() (string, error) {
	var file string
	cmd.PersistentFlags().StringVar(&file, "file", os.Getenv(envVar), what+"; "+envVar+" sets the default")
	return func() (string, error) {
		if file == "" {
			return "", fmt.Errorf("no %s: set %s or --file", what, envVar)
		}
		return file, nil
	}
}

// editRing loads the ring, applies change and writes it back atomically.
func editRing(path func() (string, error), change func(*secrets.KeyRing) error) error {
	p, ring, err := loadRing(path)
	if err != nil {
		return err
	}
	if err := change(ring); err != nil {
		return err
	}
	return ring.WriteFile(p)
}

// loadRing loads the key ring the --file flag (or SG_KEY_RING_FILE) names.
func loadRing(path func() (string, error)) (string, *secrets.KeyRing, error) {
	p, err := path()
	if err != nil {
		return "", nil, err
	}
	ring, err := secrets.LoadKeyRing(p)
	return p, ring, err
}

func newKeysAddCommand(path func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "add ID",
		Example: "  storage-gateway keys add k2",
		Short:   "Add a fresh random key (not yet primary)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := editRing(path, func(r *secrets.KeyRing) error { return r.Add(args[0]) }); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "added key %s; send SIGHUP to the gateways, then `keys promote %s`\n", args[0], args[0])
			return err
		},
	}
}

func newKeysPromoteCommand(path func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "promote ID",
		Example: "  storage-gateway keys promote k2",
		Short:   "Make a key the primary: new credentials are sealed with it",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := editRing(path, func(r *secrets.KeyRing) error { return r.Promote(args[0]) }); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "key %s is primary; send SIGHUP to the gateways, then run `keys rewrap`\n", args[0])
			return err
		},
	}
}

func newKeysListCommand(path func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List keys, how many environments each one seals, and which of those it cannot open",
		Long: "list opens every stored credential with the key ring file: a key whose id matches but whose bytes\n" +
			"differ from the key that sealed a credential (a key ring from another installation, or restored\n" +
			"from an old copy) is named with the environments it cannot open, and the command fails.",
		Example: "  storage-gateway keys list --file /etc/storage-gateway/keys.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKeyTarget(cmd, path, func(target *keyTarget) error {
				usage, err := target.registry.KeyUsage(cmd.Context())
				if err != nil {
					return err
				}
				ids := target.keys.IDs()
				for id := range usage {
					if !slices.Contains(ids, id) {
						ids = append(ids, id)
					}
				}
				slices.Sort(ids)
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "KEY\tPRIMARY\tENVIRONMENTS\tCANNOT OPEN")
				var problems []string
				for _, id := range ids {
					use := usage[id]
					if use == nil {
						use = &environments.KeyUse{}
					}
					primary, inFile := fmt.Sprint(id == target.keys.Primary()), slices.Contains(target.keys.IDs(), id)
					if !inFile {
						primary = "(not in the file)"
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", id, primary, use.Environments, cell(strings.Join(use.Unopened, ",")))
					switch {
					case !inFile:
						problems = append(problems, fmt.Sprintf("the file has no key %s, which sealed the credentials of %s", id, strings.Join(use.Unopened, ", ")))
					case len(use.Unopened) > 0:
						problems = append(problems, fmt.Sprintf("key %s cannot open the credentials of %s", id, strings.Join(use.Unopened, ", ")))
					}
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if len(problems) > 0 {
					return fmt.Errorf("%s: this key ring file is not the one that sealed them (use that file), "+
						"or the rows are damaged (env rotate them)", strings.Join(problems, "; "))
				}
				return nil
			})
		},
	}
}

func newKeysRewrapCommand(path func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "rewrap",
		Example: "  storage-gateway keys rewrap",
		Short:   "Re-seal every credential with the primary key",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKeyTarget(cmd, path, func(target *keyTarget) error {
				n, unreadable, err := target.registry.Rewrap(cmd.Context())
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "re-sealed %d environment(s) with key %s\n", n, target.keys.Primary()); err != nil {
					return err
				}
				if len(unreadable) > 0 {
					return fmt.Errorf("the credentials of %s cannot be opened and were not re-sealed: rotate them (env rotate), then rewrap again",
						strings.Join(unreadable, ", "))
				}
				return nil
			})
		},
	}
}

func newKeysRetireCommand(path func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "retire ID",
		Example: "  storage-gateway keys retire k1",
		Short:   "Remove a key; refused while it is primary or any credential uses it",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return withKeyTarget(cmd, path, func(target *keyTarget) error {
				usage, err := target.registry.KeyUsage(cmd.Context())
				if err != nil {
					return err
				}
				if use := usage[id]; use != nil {
					return fmt.Errorf("key %s still seals %d environment(s); run `keys rewrap` first", id, use.Environments)
				}
				if err := target.keys.Remove(id); err != nil {
					return err
				}
				if err := target.keys.WriteFile(target.keyFile); err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "retired key %s\n", id)
				return err
			})
		},
	}
}
