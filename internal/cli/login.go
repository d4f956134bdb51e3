package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/internal/secrets"
)

// loginTimeout bounds discovery and a token refresh; the device grant waits
// as long as the identity provider lets the code live.
const loginTimeout = 30 * time.Second

// storedLogin is what `login` keeps in the user's config directory (mode
// 0600): the token and where to refresh it.
type storedLogin struct {
	Issuer   string        `json:"issuer"`
	ClientID string        `json:"client_id"`
	TokenURL string        `json:"token_url"`
	Token    *oauth2.Token `json:"token"`
}

// loginFile is $XDG_CONFIG_HOME/storage-gateway/login.json (or the
// platform's user config directory).
func loginFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no user config directory for the login: %w", err)
	}
	return filepath.Join(dir, "storage-gateway", "login.json"), nil
}

func newLoginCommand() *cobra.Command {
	var issuer, clientID string
	var scopes []string
	cmd := &cobra.Command{
		Use:     "login",
		Example: "  storage-gateway login --issuer https://sso.example.com/realms/dcm --client-id storage-gateway-cli",
		Short:   "Sign in to the gateway's identity provider (OAuth 2.0 device authorization)",
		Long: "login signs you in with the identity provider the gateway trusts (SG_AUTH_MODE=oidc): it shows a\n" +
			"URL and a code to confirm in a browser, then keeps the token in your config directory (mode 0600).\n" +
			"The CLI then sends it to the gateway, refreshing it when it expires. SG_GATEWAY_TOKEN and\n" +
			"--gateway-token take precedence.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.CheckIssuerURL(issuer); err != nil {
				return fmt.Errorf("--issuer: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), loginTimeout)
			provider, err := oidc.NewProvider(ctx, issuer)
			cancel()
			if err != nil {
				return fmt.Errorf("cannot read the identity provider's discovery document: %w", err)
			}
			conf := oauth2.Config{ClientID: clientID, Endpoint: provider.Endpoint(), Scopes: scopes}
			if conf.Endpoint.DeviceAuthURL == "" {
				return errors.New("the identity provider does not offer the device authorization grant (no device_authorization_endpoint)")
			}
			auth, err := conf.DeviceAuth(cmd.Context())
			if err != nil {
				return fmt.Errorf("device authorization: %w", err)
			}
			out := cmd.OutOrStdout()
			if auth.VerificationURIComplete != "" {
				fmt.Fprintf(out, "To sign in, open %s\n(or open %s and enter the code %s)\n", auth.VerificationURIComplete, auth.VerificationURI, auth.UserCode)
			} else {
				fmt.Fprintf(out, "To sign in, open %s and enter the code %s\n", auth.VerificationURI, auth.UserCode)
			}
			token, err := conf.DeviceAccessToken(cmd.Context(), auth)
			if err != nil {
				return fmt.Errorf("sign-in did not complete: %w", err)
			}
			path, err := saveLogin(storedLogin{Issuer: issuer, ClientID: clientID, TokenURL: conf.Endpoint.TokenURL, Token: token})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "signed in; token saved to %s (expires %s)\n", path, token.Expiry.Local().Format(time.RFC3339))
			return err
		},
	}
	cmd.Flags().StringVar(&issuer, "issuer", os.Getenv("SG_OIDC_ISSUER_URL"), "OIDC issuer URL; SG_OIDC_ISSUER_URL sets the default")
	cmd.Flags().StringVar(&clientID, "client-id", envOr("SG_OIDC_CLIENT_ID", "storage-gateway-cli"), "OAuth client id of the CLI; SG_OIDC_CLIENT_ID sets the default")
	cmd.Flags().StringSliceVar(&scopes, "scopes", []string{"openid"}, "scopes to ask for")
	return cmd
}

func newLogoutCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "logout",
		Example: "  storage-gateway logout",
		Short:   "Forget the token `login` saved",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, err := loginFile()
			if err != nil {
				return err
			}
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "signed out")
			return err
		},
	}
}

func saveLogin(l storedLogin) (string, error) {
	path, err := loginFile()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	data, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	return path, secrets.WritePrivateFile(path, data)
}

// loginToken is the access token of the saved login, refreshed (and saved
// again) when it has expired; "" when there is no saved login.
func loginToken(ctx context.Context) (string, error) {
	path, err := loginFile()
	if err != nil {
		return "", nil
	}
	data, err := secrets.ReadPrivateFile(path, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("saved login: %w", err)
	}
	var l storedLogin
	if err := json.Unmarshal(data, &l); err != nil || l.Token == nil {
		return "", fmt.Errorf("saved login %s is unreadable; run `storage-gateway login` again", path)
	}
	if l.Token.Valid() {
		return l.Token.AccessToken, nil
	}
	conf := oauth2.Config{ClientID: l.ClientID, Endpoint: oauth2.Endpoint{TokenURL: l.TokenURL}}
	ctx, cancel := context.WithTimeout(ctx, loginTimeout)
	defer cancel()
	fresh, err := conf.TokenSource(ctx, l.Token).Token()
	if err != nil {
		return "", errors.New("the saved login has expired and could not be refreshed; run `storage-gateway login` again")
	}
	if fresh.AccessToken != l.Token.AccessToken {
		l.Token = fresh
		if _, err := saveLogin(l); err != nil {
			return "", err
		}
	}
	return strings.TrimSpace(fresh.AccessToken), nil
}
