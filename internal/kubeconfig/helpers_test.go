package kubeconfig_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/kubeconfig"
)

// requireFieldError asserts that err is a *FieldError whose field contains
// want (an empty want: the whole document, so an empty field) and whose text
// leaks none of the given strings.
func requireFieldError(t testing.TB, err error, want string, leaks ...string) {
	t.Helper()
	var fe *kubeconfig.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error = %v (%T), want *kubeconfig.FieldError", err, err)
	}
	if want == "" && fe.Field != "" || !strings.Contains(fe.Field, want) {
		t.Errorf("field = %q, want it to contain %q (error: %v)", fe.Field, want, err)
	}
	for _, leak := range leaks {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("error %q leaks input %q", err, leak)
		}
	}
}
