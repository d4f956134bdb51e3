package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/dcm-project/storage-gateway/internal/auth"
)

// newTokensCommand manages the static token file (SG_AUTH_MODE=static).
func newTokensCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tokens",
		Example: "  storage-gateway tokens create --file tokens.json --role admin --subject alice\n  storage-gateway tokens list --file tokens.json",
		Short:   "Manage the static API tokens (SG_AUTH_MODE=static)",
		Long: "tokens edits the token file (SG_AUTH_TOKEN_FILE, or --file): SHA-256 hashes of bearer tokens,\n" +
			"each with a subject, roles and an optional environment scope. The file never holds a token;\n" +
			"`tokens create` prints the new one once. Running gateways re-read the file on SIGHUP.",
	}
	path := fileFlag(cmd, "SG_AUTH_TOKEN_FILE", "token file")
	cmd.AddCommand(newTokensCreateCommand(path), newTokensListCommand(path), newTokensRevokeCommand(path))
	return cmd
}

// readTokens reads the token file; a missing one is empty when create is
// set (the first token creates the file).
func readTokens(path string, create bool) (auth.TokenFile, error) {
	f, err := auth.ReadTokenFile(path)
	if create && errors.Is(err, fs.ErrNotExist) {
		return auth.TokenFile{}, nil
	}
	return f, err
}

// editTokens reads the token file, lets change edit it and writes it back,
// holding an exclusive lock (on a lock file beside it) throughout, so two
// commands at once cannot lose each other's change — a revocation least of
// all.
func editTokens(path string, create bool, change func(*auth.TokenFile) error) error {
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("lock the token file: %w", err)
	}
	defer func() { _ = lock.Close() }()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock the token file: %w", err)
	}
	f, err := readTokens(path, create)
	if err != nil {
		return err
	}
	if err := change(&f); err != nil {
		return err
	}
	return f.Write(path)
}

func newTokensCreateCommand(path func() (string, error)) *cobra.Command {
	var subject string
	var roles, envs []string
	var replace bool
	cmd := &cobra.Command{
		Use: "create --role ROLE --subject NAME [--environments ID,...]",
		Example: "  storage-gateway tokens create --role admin --subject alice\n" +
			"  storage-gateway tokens create --role dcm --subject dcm-east --environments east,east-2\n" +
			"  storage-gateway tokens create --role viewer --subject grafana --replace",
		Short: "Create a token; it is printed once, alone on the last line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := path()
			if err != nil {
				return err
			}
			var parsed []auth.Role
			for _, r := range roles {
				role, ok := auth.ParseRole(r)
				if !ok {
					return fmt.Errorf("--role %s: must be admin, dcm or viewer", r)
				}
				parsed = append(parsed, role)
			}
			if len(parsed) == 0 {
				return errors.New("--role is required: admin, dcm or viewer (repeat it for several)")
			}
			var scope []string
			if cmd.Flags().Changed("environments") {
				scope = envs
				if scope == nil {
					scope = []string{}
				}
			}
			revoked := 0
			var token string
			var entry auth.StaticToken
			err = editTokens(p, true, func(f *auth.TokenFile) error {
				if replace {
					var ids []string
					for _, t := range f.Tokens {
						if t.Subject == subject {
							ids = append(ids, t.ID)
						}
					}
					for _, id := range ids {
						if f.Revoke(id) {
							revoked++
						}
					}
				}
				var err error
				token, entry, err = f.Add(subject, parsed, scope, time.Now())
				return err
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "created token %s for %s (roles %s; environments %s) in %s\n",
				entry.ID, entry.Subject, joinNames(entry.Roles, ", "), describeScope(entry.Environments), p)
			if revoked > 0 {
				fmt.Fprintf(out, "revoked %d earlier token(s) of %s\n", revoked, subject)
			}
			fmt.Fprintln(out, "send SIGHUP to running gateways to load it; the token is shown only now:")
			_, err = fmt.Fprintln(out, token)
			return err
		},
	}
	cmd.Flags().StringVar(&subject, "subject", "", "who the token stands for (audit records name it)")
	cmd.Flags().StringSliceVar(&roles, "role", nil, "role: admin, dcm or viewer (repeatable)")
	cmd.Flags().StringSliceVar(&envs, "environments", nil, "limit the token to these environment ids")
	cmd.Flags().BoolVar(&replace, "replace", false, "revoke the subject's other tokens")
	_ = cmd.MarkFlagRequired("subject")
	return cmd
}

// listedToken is what tokens list shows of a token: never the token or
// its hash.
type listedToken struct {
	ID           string    `json:"id"`
	Subject      string    `json:"subject"`
	Roles        []string  `json:"roles"`
	Environments []string  `json:"environments,omitempty"`
	CreateTime   time.Time `json:"create_time"`
}

var tokenTable = table[listedToken]{
	kind: "token",
	name: func(t listedToken) string { return t.ID },
	columns: []column[listedToken]{
		{header: "ID", value: func(t listedToken) string { return t.ID }},
		{header: "SUBJECT", value: func(t listedToken) string { return t.Subject }},
		{header: "ROLES", value: func(t listedToken) string { return strings.Join(t.Roles, ",") }},
		{header: "ENVIRONMENTS", value: func(t listedToken) string { return describeScope(t.Environments) }},
		{header: "CREATED", value: func(t listedToken) string { return t.CreateTime.Format(time.RFC3339) }},
	},
}

func newTokensListCommand(path func() (string, error)) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List tokens: id, subject, roles, environments, created (never a token or hash)",
		Example: "  storage-gateway tokens list --file /etc/storage-gateway/tokens.json\n  storage-gateway tokens list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			p, err := path()
			if err != nil {
				return err
			}
			f, err := readTokens(p, false)
			if err != nil {
				return err
			}
			rows := make([]listedToken, len(f.Tokens))
			for i, t := range f.Tokens {
				rows[i] = listedToken{ID: t.ID, Subject: t.Subject, Roles: auth.RoleNames(t.Roles), Environments: t.Environments,
					CreateTime: t.CreateTime}
			}
			return printItems(cmd.OutOrStdout(), output, rows, false, tokenTable, nil)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: "+strings.Join(outputFormats, ", "))
	return cmd
}

func newTokensRevokeCommand(path func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "revoke ID",
		Example: "  storage-gateway tokens revoke 3f9a1c2b",
		Short:   "Remove a token (running gateways stop accepting it on SIGHUP)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := path()
			if err != nil {
				return err
			}
			err = editTokens(p, false, func(f *auth.TokenFile) error {
				if !f.Revoke(args[0]) {
					return fmt.Errorf("no token %s in %s (see `tokens list`)", args[0], p)
				}
				return nil
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked token %s; send SIGHUP to running gateways\n", args[0])
			return err
		},
	}
}

func describeScope(envs []string) string {
	if envs == nil {
		return "all"
	}
	return strings.Join(envs, ", ")
}
