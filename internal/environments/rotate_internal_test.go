package environments

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// A token env bootstrap minted is rotated by bootstrap; any other
// credentials with env rotate.
func TestRotateHint(t *testing.T) {
	jwt := func(sub string) string {
		payload := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"` + sub + `","exp":4102444800}`))
		return "eyJhbGciOiJSUzI1NiJ9." + payload + ".c2ln"
	}
	for _, tc := range []struct {
		conn kubeconfig.Connection
		want string
	}{
		{kubeconfig.Connection{Token: jwt(BootstrapSubject)}, "storage-gateway env bootstrap east --rotate"},
		{kubeconfig.Connection{Token: jwt("system:serviceaccount:other:gw")}, "storage-gateway env rotate east"},
		{kubeconfig.Connection{Token: "opaque"}, "storage-gateway env rotate east"},
	} {
		if got := rotateHint("east", tc.conn); !strings.Contains(got, tc.want) {
			t.Errorf("rotateHint for %q = %q, want it to say %q", tc.conn.TokenSubject(), got, tc.want)
		}
	}
}
