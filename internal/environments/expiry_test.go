package environments_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dcm-project/storage-gateway/internal/environments"
	"github.com/dcm-project/storage-gateway/test/harness"
	"github.com/dcm-project/storage-gateway/test/registrytest"
)

// An environment registered with a short-lived TokenRequest token shows
// when it expires, turns DEGRADED saying so (and what to do) while it still
// works, and exports the expiry as a metric; rotating in a long-lived token
// makes it READY again.
func TestExpiringCredentialsDegradeTheEnvironment(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.New(t, registrytest.Options{})
	mint := func(ttl time.Duration) (string, time.Time) {
		t.Helper()
		tr, err := cluster.AdminClient().CoreV1().ServiceAccounts(harness.GatewayNamespace).CreateToken(ctx, harness.GatewayServiceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl.Seconds()))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token, tr.Status.ExpirationTimestamp.UTC()
	}
	token, expiry := mint(time.Hour)
	in := registration(t, "expiring")
	in.Credentials = environments.Credentials{Explicit: tokenConnection(token)}
	in.Spec.Namespace = cluster.Spec.Environment.Namespace
	env, _, err := reg.Registry.Register(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := env.Connection.CredentialsExpireTime; got == nil || got.Sub(expiry).Abs() > time.Second {
		t.Fatalf("credentials_expire_time %v, want the token's %v", got, expiry)
	}
	if env.Status.State != environments.StateDegraded || !strings.Contains(env.Status.Message, "the credentials expire at "+expiry.Format(time.RFC3339)) ||
		!strings.Contains(env.Status.Message, "storage-gateway env rotate expiring") {
		t.Fatalf("status %s %q, want DEGRADED saying when the credentials expire", env.Status.State, env.Status.Message)
	}

	families, err := reg.Registry.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var exported float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "storage_gateway_environment_credentials_expire_time_seconds" && m.GetLabel()[0].GetValue() == "expiring" {
				exported = m.GetGauge().GetValue()
			}
		}
	}
	if int64(exported) != expiry.Unix() {
		t.Fatalf("exported expiry %v, want %d", exported, expiry.Unix())
	}

	// A probe keeps saying so, and records the expiry of credentials
	// stored before the gateway read expiries; a year-long token clears it.
	if _, err := reg.DB.Exec(ctx, `UPDATE environments SET credentials_expire_time = NULL WHERE id = 'expiring'`); err != nil {
		t.Fatal(err)
	}
	owner := reg.Member(t, "replica-1") // the periodic probe is its owner's
	registrytest.Own(t, owner, "expiring")
	lease, err := owner.Lease("expiring")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Registry.Probe(ctx, "expiring", lease); err != nil {
		t.Fatal(err)
	}
	if env, err = reg.Registry.Get(ctx, "expiring"); err != nil || env.Status.State != environments.StateDegraded ||
		env.Connection.CredentialsExpireTime == nil || env.Connection.CredentialsExpireTime.Sub(expiry).Abs() > time.Second {
		t.Fatalf("after a probe: %s %q, expires %v (%v)", env.Status.State, env.Status.Message, env.Connection.CredentialsExpireTime, err)
	}
	long, longExpiry := mint(365 * 24 * time.Hour)
	patch, err := json.Marshal(map[string]any{"credentials": environments.ExplicitCredentials{
		Server: cluster.ServerURL(), CertificateAuthorityData: cluster.CAData(), Token: long}})
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := reg.Registry.Update(ctx, "expiring", patch)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Status.State != environments.StateReady || rotated.Connection.CredentialsExpireTime == nil ||
		rotated.Connection.CredentialsExpireTime.Sub(longExpiry).Abs() > time.Second {
		t.Fatalf("after rotating in a year-long token: %s %q, expires %v", rotated.Status.State, rotated.Status.Message, rotated.Connection.CredentialsExpireTime)
	}
}
