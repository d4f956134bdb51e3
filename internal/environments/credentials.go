package environments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// ExplicitCredentials is the JSON shape of the write-only `credentials` field
// (PEM fields are base64 in JSON, as in a kubeconfig), and of the plaintext
// sealed into each row.
type ExplicitCredentials struct {
	Server                   string `json:"server"`
	CertificateAuthorityData []byte `json:"certificate_authority_data"`
	TLSServerName            string `json:"tls_server_name"`
	InsecureSkipTLSVerify    bool   `json:"insecure_skip_tls_verify"`
	Token                    string `json:"token"`
	ClientCertificateData    []byte `json:"client_certificate_data"`
	ClientKeyData            []byte `json:"client_key_data"`
}

// Connection converts the JSON shape into connection settings.
func (c ExplicitCredentials) Connection() *kubeconfig.Connection {
	return &kubeconfig.Connection{
		Server: c.Server, CAData: c.CertificateAuthorityData, TLSServerName: c.TLSServerName,
		Insecure: c.InsecureSkipTLSVerify, Token: c.Token,
		ClientCertData: c.ClientCertificateData, ClientKeyData: c.ClientKeyData,
	}
}

func explicitFrom(c kubeconfig.Connection) ExplicitCredentials {
	return ExplicitCredentials{
		Server: c.Server, CertificateAuthorityData: c.CAData, TLSServerName: c.TLSServerName,
		InsecureSkipTLSVerify: c.Insecure, Token: c.Token,
		ClientCertificateData: c.ClientCertData, ClientKeyData: c.ClientKeyData,
	}
}

// resolveCredentials validates what the admin supplied and returns the
// connection plus the namespace a kubeconfig context names.
func (s *Service) resolveCredentials(c Credentials) (kubeconfig.Connection, string, error) {
	switch {
	case c.Kubeconfig != nil && c.Explicit != nil:
		return kubeconfig.Connection{}, "", fault.Invalid("kubeconfig", "give either kubeconfig or credentials, not both")
	case c.Kubeconfig != nil:
		parsed, err := kubeconfig.Parse(c.Kubeconfig, kubeconfig.Options{Context: c.KubeconfigContext, AllowInsecure: s.allowInsecure})
		if err != nil {
			return kubeconfig.Connection{}, "", fieldError("kubeconfig", err)
		}
		return parsed.Connection, parsed.Namespace, nil
	case c.Explicit != nil:
		if c.KubeconfigContext != "" {
			return kubeconfig.Connection{}, "", fault.Invalid("kubeconfig_context", "applies only to a kubeconfig")
		}
		conn, err := c.Explicit.Normalize(s.allowInsecure)
		if err != nil {
			return kubeconfig.Connection{}, "", fieldError("credentials", err)
		}
		return conn, "", nil
	}
	return kubeconfig.Connection{}, "", fault.Invalid("kubeconfig", "either kubeconfig or credentials is required")
}

// fieldError turns a kubeconfig.FieldError into an InvalidArgument under prefix.
func fieldError(prefix string, err error) error {
	var fe *kubeconfig.FieldError
	if !errors.As(err, &fe) {
		return fault.Invalid(prefix, "is invalid")
	}
	field := prefix
	if fe.Field != "" {
		field += "." + fe.Field
	}
	return fault.Invalid(field, "%s", fe.Reason)
}

// newRecord builds the row for a new environment, sealing its credentials.
func (s *Service) newRecord(ctx context.Context, reg Registration, spec Spec, conn kubeconfig.Connection, probe clusters.ProbeResult) (record, error) {
	rec := record{Environment: Environment{ID: reg.ID, Spec: spec, Status: statusFrom(Status{}, probe)}, registeredBy: reg.RegisteredBy}
	if err := s.setCredentials(ctx, &rec, conn); err != nil {
		return record{}, err
	}
	return rec, nil
}

// setCredentials seals conn into rec under a new generation and updates its
// public description.
func (s *Service) setCredentials(ctx context.Context, rec *record, conn kubeconfig.Connection) error {
	// The sealed plaintext is the whole connection, not only its secrets.
	// Server, CA, TLS name and the insecure flag are also kept in plain
	// columns so they can be shown, but the gateway connects with the sealed
	// copy and refuses a row whose columns disagree with it (see open):
	// whoever can write to the database but lacks the key ring cannot
	// redirect the token to a server of their choosing.
	plain, err := json.Marshal(explicitFrom(conn))
	if err != nil {
		return fmt.Errorf("encode credentials: %w", err)
	}
	gen, err := s.repo.nextGeneration(ctx, s.repo.db)
	if err != nil {
		clear(plain)
		return err
	}
	sealed, err := s.keys.Load().Seal(rec.ID, gen, plain)
	clear(plain)
	if err != nil {
		return fmt.Errorf("seal credentials: %w", err)
	}
	rec.sealed = sealed
	rec.caData = conn.CAData
	rec.Connection = ConnectionInfo{
		Server:                conn.Server,
		TLSServerName:         conn.TLSServerName,
		CASHA256:              conn.CASHA256(),
		Insecure:              conn.Insecure,
		AuthType:              conn.AuthType(),
		KeyID:                 sealed.KeyID,
		CredentialsUpdateTime: now(),
	}
	rec.Connection.CredentialsExpireTime = expiryOf(conn)
	return nil
}

// errChangedMeanwhile is a row read before a concurrent change of its
// credentials: retrying reads the new ones.
var errChangedMeanwhile = &fault.Error{Kind: fault.Conflict, Detail: "the environment's credentials were changed concurrently; retry"}

// open unseals the connection of a stored environment and checks that the
// plain columns still describe it, and that the row does not hold an older
// generation of credentials than this process has already seen for it
// (credentials rolled back by someone who can write to the database).
func (s *Service) open(ctx context.Context, rec record) (kubeconfig.Connection, error) {
	if seen, ok := s.generations.Load(rec.ID); ok && rec.sealed.Generation < seen.(int64) {
		// rec may just have been read before a rotation: only a row that
		// still holds the older generation has been rolled back.
		current, err := s.repo.credentialsGeneration(ctx, rec.ID)
		if err != nil {
			return kubeconfig.Connection{}, err
		}
		if current != rec.sealed.Generation {
			return kubeconfig.Connection{}, errChangedMeanwhile
		}
		return kubeconfig.Connection{}, fmt.Errorf("environment %s: its stored credentials are older (generation %d) than ones already in use (%d): rolled back? refusing to use them",
			rec.ID, rec.sealed.Generation, seen)
	}
	plain, err := s.keys.Load().Open(rec.ID, rec.sealed)
	if err != nil {
		return kubeconfig.Connection{}, fmt.Errorf("open credentials of environment %s: %w", rec.ID, err)
	}
	var sealed ExplicitCredentials
	err = json.Unmarshal(plain, &sealed)
	clear(plain)
	if err != nil {
		return kubeconfig.Connection{}, fmt.Errorf("open credentials of environment %s: malformed plaintext", rec.ID)
	}
	conn := *sealed.Connection()
	if conn.Server != rec.Connection.Server || !bytes.Equal(conn.CAData, rec.caData) ||
		conn.TLSServerName != rec.Connection.TLSServerName || conn.Insecure != rec.Connection.Insecure {
		return kubeconfig.Connection{}, fmt.Errorf("environment %s: stored connection settings differ from its sealed credentials; refusing to use them", rec.ID)
	}
	s.sawGeneration(rec.ID, rec.sealed.Generation)
	return conn, nil
}

// sawGeneration raises the environment's high-water mark of credential
// generations.
func (s *Service) sawGeneration(id string, gen int64) {
	for {
		prev, loaded := s.generations.LoadOrStore(id, gen)
		if !loaded || prev.(int64) >= gen || s.generations.CompareAndSwap(id, prev, gen) {
			return
		}
	}
}
