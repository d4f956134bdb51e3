package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/url"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/config"
)

// newAuthenticator builds the API's authentication from the settings. reload
// (on SIGHUP) re-reads the static token file, or the OIDC issuer's key
// set; it is nil in disabled mode.
func newAuthenticator(ctx context.Context, cfg config.Config, logger *slog.Logger) (_ *auth.Authenticator, reload func(context.Context) error, _ error) {
	opts := auth.Options{Mode: auth.Mode(cfg.AuthMode), TrustedNetworks: cfg.DCMTrustedNetworks(), TrustedHosts: servedHosts(cfg)}
	switch opts.Mode {
	case auth.ModeDisabled:
		logger.Error("AUTHENTICATION IS DISABLED: anyone who can reach this port can register, rotate and delete clusters " +
			"and create and delete volumes (SG_AUTH_MODE=disabled, SG_AUTH_DISABLED_I_UNDERSTAND=true)")
	case auth.ModeStatic:
		if cfg.AuthTokenFile == "" {
			return nil, nil, errors.New("SG_AUTH_TOKEN_FILE: required with SG_AUTH_MODE=static (the default); create one with " +
				"`storage-gateway tokens create --file PATH --role admin --subject NAME`, or set SG_AUTH_MODE=oidc")
		}
		tokens, err := auth.NewStaticTokens(cfg.AuthTokenFile)
		if err != nil {
			return nil, nil, err
		}
		opts.Tokens, reload = tokens, func(context.Context) error { return tokens.Reload() }
		logger.Info("API authentication: static tokens", "tokens", tokens.Count(), "file", cfg.AuthTokenFile)
	case auth.ModeOIDC:
		verifier := auth.NewOIDC(auth.OIDCOptions{
			IssuerURL: cfg.OIDCIssuerURL, Audience: cfg.OIDCAudience, RoleClaims: cfg.OIDCRoleClaimList(),
			RolePrefix: cfg.OIDCRolePrefix, EnvironmentsClaim: cfg.OIDCEnvironmentsClaim,
			SigningAlgs: cfg.OIDCSigningAlgList(), ClockSkew: cfg.OIDCClockSkew,
			MaxLifetime: cfg.OIDCMaxTokenLifetime, AuthorizedParties: cfg.OIDCAuthorizedPartyList(),
		})
		if err := verifier.Discover(ctx); err != nil {
			logger.Warn("the identity provider cannot be reached yet; API calls that need a token answer 503 until it can",
				"issuer", cfg.OIDCIssuerURL, "error", err)
		}
		opts.Tokens, reload = verifier, verifier.Reload
		logger.Info("API authentication: OIDC", "issuer", cfg.OIDCIssuerURL, "audience", cfg.OIDCAudience,
			"role_claims", cfg.OIDCRoleClaimList(), "role_prefix", cfg.OIDCRolePrefix)
	}
	if len(opts.TrustedNetworks) > 0 {
		logger.Warn("requests without a token from SG_AUTH_DCM_TRUSTED_NETWORKS get the dcm role (for DCM's service-provider-manager, "+
			"which sends no token yet): anyone on these networks can create and delete volumes", "networks", cfg.AuthDCMTrustedNetworks)
	}
	return auth.New(opts), reload, nil
}

// servedHosts are the gateway's own host names: SG_ALLOWED_HOSTS and the
// host of SG_PUBLIC_URL. A token-less DCM caller must name one of them (or
// an IP literal).
func servedHosts(cfg config.Config) []string {
	hosts := cfg.AllowedHostList()
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	return hosts
}

// allowedHosts is the API's Host allow-list: none (any name) unless
// SG_ALLOWED_HOSTS lists some, then those and the public URL's host.
func allowedHosts(cfg config.Config) []string {
	if len(cfg.AllowedHostList()) == 0 {
		return nil
	}
	return servedHosts(cfg)
}
