package environments

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dcm-project/storage-gateway/internal/clusters"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// sealedSecrets is the plaintext inside a sealed credentials blob: only the
// secret half of a connection. Server, CA and TLS name are public facts kept
// in plain columns so they can be shown.
type sealedSecrets struct {
	Token          string `json:"token,omitempty"`
	ClientCertData []byte `json:"client_certificate_data,omitempty"`
	ClientKeyData  []byte `json:"client_key_data,omitempty"`
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
func (s *Service) newRecord(id string, spec Spec, conn kubeconfig.Connection, probe clusters.ProbeResult) (record, error) {
	rec := record{Environment: Environment{ID: id, Spec: spec, Status: statusFrom(Status{}, probe)}}
	if err := s.setCredentials(&rec, conn); err != nil {
		return record{}, err
	}
	return rec, nil
}

// setCredentials seals conn into rec and updates its public description.
func (s *Service) setCredentials(rec *record, conn kubeconfig.Connection) error {
	plain, err := json.Marshal(sealedSecrets{Token: conn.Token, ClientCertData: conn.ClientCertData, ClientKeyData: conn.ClientKeyData})
	if err != nil {
		return fmt.Errorf("encode credentials: %w", err)
	}
	sealed, err := s.keys.Load().Seal(rec.ID, plain)
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
	return nil
}

// open rebuilds the full connection of a stored environment.
func (s *Service) open(rec record) (kubeconfig.Connection, error) {
	plain, err := s.keys.Load().Open(rec.ID, rec.sealed)
	if err != nil {
		return kubeconfig.Connection{}, fmt.Errorf("open credentials of environment %s: %w", rec.ID, err)
	}
	var sec sealedSecrets
	err = json.Unmarshal(plain, &sec)
	clear(plain)
	if err != nil {
		return kubeconfig.Connection{}, fmt.Errorf("open credentials of environment %s: malformed plaintext", rec.ID)
	}
	return kubeconfig.Connection{
		Server:         rec.Connection.Server,
		CAData:         rec.caData,
		TLSServerName:  rec.Connection.TLSServerName,
		Insecure:       rec.Connection.Insecure,
		Token:          sec.Token,
		ClientCertData: sec.ClientCertData,
		ClientKeyData:  sec.ClientKeyData,
	}, nil
}
