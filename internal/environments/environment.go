package environments

import (
	"time"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// Spec is everything an admin sets about an environment except credentials.
// The JSON names are the API's; merge patches are applied to this document.
type Spec struct {
	DisplayName       string            `json:"display_name"`
	Description       string            `json:"description"`
	Labels            map[string]string `json:"labels"`
	Region            string            `json:"region"`
	Zone              string            `json:"zone"`
	Namespace         string            `json:"namespace"`
	AllowedNamespaces []string          `json:"allowed_namespaces"`
	Defaults          Defaults          `json:"defaults"`
	DCM               DCMSettings       `json:"dcm"`
	// CapabilityOverrides state what the environment's classes support
	// where the built-in driver table is silent or wrong.
	CapabilityOverrides capabilities.Overrides `json:"capability_overrides"`
	// ShareNamespaces lets the environment serve namespaces that another
	// environment on the same cluster serves: each still serves only the
	// claims it made (internal/volumes labels every claim with its
	// environment). Off, such a registration or update is refused.
	ShareNamespaces bool `json:"share_namespaces"`
}

// Defaults apply to volumes whose request leaves the setting open.
type Defaults struct {
	StorageClass string `json:"storage_class"`
	AccessMode   string `json:"access_mode"`
	VolumeMode   string `json:"volume_mode"`
}

// DCMSettings control the environment's registration as a DCM provider.
type DCMSettings struct {
	Register     bool   `json:"register"`
	ProviderName string `json:"provider_name"`
}

// Namespaces is the default namespace followed by the extra allowed ones: every
// namespace the gateway may place volumes in and so needs permissions in.
func (s Spec) Namespaces() []string {
	return append([]string{s.Namespace}, s.AllowedNamespaces...)
}

// Credentials is how an admin supplies access to a cluster: an inline
// kubeconfig (with an optional context selection) or explicit settings.
// Exactly one of Kubeconfig and Explicit is set.
type Credentials struct {
	Kubeconfig        []byte
	KubeconfigContext string
	Explicit          *kubeconfig.Connection
}

func (c Credentials) empty() bool { return c.Kubeconfig == nil && c.Explicit == nil }

// Registration is a request to register an environment.
type Registration struct {
	ID          string
	Spec        Spec
	Credentials Credentials
	// RegisteredBy is the subject registering it (see Service.Register).
	RegisteredBy string
}

// Environment is the registry's view of one environment. It holds no secret:
// Connection describes the credentials without containing them.
type Environment struct {
	ID         string
	Spec       Spec
	Connection ConnectionInfo
	Status     Status
	CreateTime time.Time
	UpdateTime time.Time

	generation int64
}

// ConnectionInfo describes where and how the gateway connects.
type ConnectionInfo struct {
	Server                string
	TLSServerName         string
	CASHA256              string
	Insecure              bool
	AuthType              string
	KeyID                 string
	CredentialsUpdateTime time.Time
	// CredentialsExpireTime is when the credentials stop working, where
	// they say so (kubeconfig.Connection.CredentialsExpiry); nil otherwise.
	CredentialsExpireTime *time.Time
}

// Status is the latest probe result plus counts.
type Status struct {
	State             State
	Message           string
	KubernetesVersion string
	LastProbeTime     *time.Time
	LastReadyTime     *time.Time
	StorageClassCount *int
	// ClusterID is the cluster's identity as the last probe that reached
	// it read it (clusters.ProbeResult.ClusterID); empty before.
	ClusterID   string
	VolumeCount int
	// UnadoptedVolumeCount counts the claims labelled for DCM storage that
	// no volume record serves (internal/volumes counts them; an admin
	// adopts them).
	UnadoptedVolumeCount int
	DCMRegistration      DCMRegistration
}

// DCMRegistration is the state of the environment's provider registration.
type DCMRegistration struct {
	State      string `json:"state,omitempty"`
	ProviderID string `json:"provider_id,omitempty"`
	Message    string `json:"message,omitempty"`
	// DisplacedBy is the endpoint last found holding the provider's name
	// instead of the gateway (a per-cluster provider started again, which
	// registers under its name at every start), DisplacedTime when that was
	// first seen, ReclaimTime when the gateway registered the name again.
	DisplacedBy   string     `json:"displaced_by,omitempty"`
	DisplacedTime *time.Time `json:"displaced_time,omitempty"`
	ReclaimTime   *time.Time `json:"reclaim_time,omitempty"`
	// InstancesWithoutClaim counts DCM's instances of the provider that the
	// environment neither serves nor can adopt — no volume record, no
	// labelled claim in its namespaces — as of InstancesCheckTime; their
	// first ids are in InstancesWithoutClaimIDs. After a take-over DCM would
	// hear 404 for each, and forget it.
	InstancesWithoutClaim    *int       `json:"instances_without_claim,omitempty"`
	InstancesWithoutClaimIDs []string   `json:"instances_without_claim_ids,omitempty"`
	InstancesCheckTime       *time.Time `json:"instances_check_time,omitempty"`
}

// ListQuery filters and pages a list of environments.
type ListQuery struct {
	// Environments limits the list to these ids; nil lists every one (a
	// principal's scope, see auth.Principal.Narrow).
	Environments []string
	// LabelSelector is a Kubernetes label selector over the labels.
	LabelSelector string
	Region        string
	State         State
	MaxPageSize   int
	PageToken     string
}

// Page is one page of a list.
type Page struct {
	Environments  []Environment
	NextPageToken string
}
