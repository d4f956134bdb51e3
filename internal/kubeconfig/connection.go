package kubeconfig

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
)

// Connection is everything needed to reach one cluster. Token and
// ClientKeyData are secrets: compare them with Equal, never log them.
type Connection struct {
	Server         string // normalized "https://host[:port]" (no trailing slash)
	CAData         []byte // PEM, may be empty (then system roots are used)
	TLSServerName  string
	Insecure       bool // insecure-skip-tls-verify; only possible when allowed
	Token          string
	ClientCertData []byte // PEM
	ClientKeyData  []byte // PEM
}

// Authentication types reported by Connection.AuthType.
const (
	AuthToken             = "token"
	AuthClientCertificate = "client_certificate"
)

// maxTokenSize bounds bearer tokens; real ones are a few KiB at most and the
// token travels in every request header.
const maxTokenSize = 16 << 10

// AuthType reports how the connection authenticates: AuthToken or
// AuthClientCertificate. It returns "" only for a connection without
// credentials, which Normalize rejects.
func (c Connection) AuthType() string {
	switch {
	case c.Token != "":
		return AuthToken
	case len(c.ClientCertData) > 0:
		return AuthClientCertificate
	}
	return ""
}

// expiryAlgorithms are the JWS algorithms a bearer token's expiry is read
// from: the asymmetric ones Kubernetes issuers sign with.
var expiryAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// CredentialsExpiry reports when the credentials stop working, where they
// say so: a bearer token that is a JWT with an exp claim (ServiceAccount
// tokens from the TokenRequest API, OIDC tokens), or a client certificate's
// NotAfter. The token's claims are read without verifying its signature —
// the cluster verifies it; the gateway only wants to warn before it
// expires. ok is false for credentials that carry no expiry (an opaque or
// legacy token).
func (c Connection) CredentialsExpiry() (expiry time.Time, ok bool) {
	if c.Token != "" {
		tok, err := josejwt.ParseSigned(c.Token, expiryAlgorithms)
		if err != nil {
			return time.Time{}, false
		}
		var claims josejwt.Claims
		if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil || claims.Expiry == nil {
			return time.Time{}, false
		}
		return claims.Expiry.Time().UTC(), true
	}
	for rest := c.ClientCertData; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return time.Time{}, false
		}
		if block.Type == certificateBlock {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return time.Time{}, false
			}
			return cert.NotAfter.UTC(), true
		}
	}
}

// TokenSubject is the subject (sub) a bearer token that is a JWT names, read
// without verifying it (only the cluster can); "" for anything else. It
// tells a ServiceAccount's token apart, to say how to rotate it.
func (c Connection) TokenSubject() string {
	if c.Token == "" {
		return ""
	}
	tok, err := josejwt.ParseSigned(c.Token, expiryAlgorithms)
	if err != nil {
		return ""
	}
	var claims josejwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil {
		return ""
	}
	return claims.Subject
}

// CASHA256 returns the lowercase hex SHA-256 of the DER bytes of the first CA
// certificate, or "" when there is none. It identifies the trusted CA in API
// responses and audit records without exposing the PEM.
func (c Connection) CASHA256() string {
	rest := c.CAData
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return ""
		}
		if block.Type == certificateBlock {
			sum := sha256.Sum256(block.Bytes)
			return hex.EncodeToString(sum[:])
		}
	}
}

// Normalize checks explicitly supplied credentials with the same rules Parse
// applies to a kubeconfig and returns them with the server URL normalized, so
// equal settings compare equal however they were spelled. Here the PEM fields
// hold raw PEM, not base64, and errors name the API's snake_case fields.
func (c Connection) Normalize(allowInsecure bool) (Connection, error) {
	return c.normalized(allowInsecure, apiFields)
}

// redacted is what formatting and logging show of a connection: where it
// goes and how it authenticates, never the credentials.
func (c Connection) redacted() string {
	return "kubeconfig.Connection{Server:" + c.Server + " AuthType:" + c.AuthType() + " CA:" + c.CASHA256() + "}"
}

// Format makes every fmt verb (%v, %+v, %#v, %s) print the redacted form, so
// a stray Printf cannot leak a token.
func (c Connection) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, c.redacted()) }

// LogValue keeps slog from printing the credentials.
func (c Connection) LogValue() slog.Value { return slog.StringValue(c.redacted()) }

// Equal reports whether both connections are the same. Secret fields are
// compared in constant time so that comparing a stored connection with a
// submitted one does not leak the stored secret through timing.
func (c Connection) Equal(o Connection) bool {
	secrets := subtle.ConstantTimeCompare([]byte(c.Token), []byte(o.Token)) &
		subtle.ConstantTimeCompare(c.ClientKeyData, o.ClientKeyData)
	return secrets == 1 &&
		c.Server == o.Server &&
		bytes.Equal(c.CAData, o.CAData) &&
		c.TLSServerName == o.TLSServerName &&
		c.Insecure == o.Insecure &&
		bytes.Equal(c.ClientCertData, o.ClientCertData)
}

// fieldNames are the names errors use for each Connection field: kubeconfig
// paths for Parse, API names for Normalize. credentials names the field blamed
// when the choice of authentication itself is wrong.
type fieldNames struct {
	server, ca, tlsServerName, insecure, token, cert, key, credentials string
}

var apiFields = fieldNames{
	server:        "server",
	ca:            "certificate_authority_data",
	tlsServerName: "tls_server_name",
	insecure:      "insecure_skip_tls_verify",
	token:         "token",
	cert:          "client_certificate_data",
	key:           "client_key_data",
	credentials:   "token",
}

// normalized validates c and returns it with its server normalized.
func (c Connection) normalized(allowInsecure bool, f fieldNames) (Connection, error) {
	server, err := normalizeServer(c.Server)
	if err != nil {
		return Connection{}, fieldErr(f.server, err.Error())
	}
	c.Server = server
	if err := c.checkTLS(allowInsecure, f); err != nil {
		return Connection{}, err
	}
	if err := c.checkCredentials(f); err != nil {
		return Connection{}, err
	}
	return c, nil
}

// checkTLS validates how the server's certificate is verified.
func (c Connection) checkTLS(allowInsecure bool, f fieldNames) error {
	if len(c.CAData) > 0 {
		if err := checkCertificates(c.CAData); err != nil {
			return fieldErr(f.ca, err.Error())
		}
	}
	switch {
	case c.TLSServerName != "" && !validHost(c.TLSServerName):
		return fieldErr(f.tlsServerName, "must be a DNS name or an IP address")
	case c.Insecure && !allowInsecure:
		return fieldErr(f.insecure, "not allowed: this gateway does not accept insecure clusters")
	case c.Insecure && len(c.CAData) > 0:
		return fieldErr(f.insecure, "cannot be combined with certificate authority data (ambiguous)")
	}
	return nil
}

// checkCredentials requires exactly one way to authenticate: a token, or a
// client certificate with its key.
func (c Connection) checkCredentials(f fieldNames) error {
	hasCert, hasKey := len(c.ClientCertData) > 0, len(c.ClientKeyData) > 0
	switch {
	case c.Token != "" && (hasCert || hasKey):
		return fieldErr(f.credentials, "a token cannot be combined with a client certificate")
	case c.Token != "":
		return checkToken(c.Token, f.token)
	case hasCert && !hasKey:
		return fieldErr(f.key, "required together with the client certificate")
	case hasKey && !hasCert:
		return fieldErr(f.cert, "required together with the client key")
	case hasCert:
		return checkKeyPair(c.ClientCertData, c.ClientKeyData, f)
	}
	return fieldErr(f.credentials, "credentials required: a token, or a client certificate with its key")
}

// checkToken accepts only visible ASCII: the token is sent in an HTTP header,
// where whitespace or control characters could split or smuggle headers.
func checkToken(token, field string) error {
	if len(token) > maxTokenSize {
		return fieldErr(field, "longer than 16 KiB")
	}
	for i := range len(token) {
		if token[i] <= ' ' || token[i] > '~' {
			return fieldErr(field, "must be visible ASCII (no whitespace or control characters)")
		}
	}
	return nil
}
