// Package quadlet_test checks the Podman quadlet units against the binary:
// they set only settings it reads, run it as the user its secret files are
// mounted for, and migrate before it starts.
package quadlet_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/config"
)

// settings are the SG_* names a unit or environment file sets.
var settings = regexp.MustCompile(`\b(SG_[A-Z0-9_]+)=|target=(SG_[A-Z0-9_]+)`)

func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestQuadletUnitsMatchTheBinary(t *testing.T) {
	gateway, migrate := read(t, "storage-gateway.container"), read(t, "storage-gateway-migrate.container")
	for name, text := range map[string]string{"storage-gateway.container": gateway, "storage-gateway-migrate.container": migrate,
		"storage-gateway.env.example": read(t, "storage-gateway.env.example")} {
		found := 0
		for _, m := range settings.FindAllStringSubmatch(text, -1) {
			v := m[1] + m[2]
			found++
			if !slices.Contains(config.Variables(), v) {
				t.Errorf("%s sets %s, which internal/config does not read", name, v)
			}
		}
		if found == 0 {
			t.Errorf("%s sets no SG_* setting", name)
		}
	}
	image := regexp.MustCompile(`(?m)^Image=(.+)$`)
	if a, b := image.FindStringSubmatch(gateway), image.FindStringSubmatch(migrate); a == nil || b == nil || a[1] != b[1] {
		t.Errorf("the units run different images: %v, %v", a, b)
	}
	if !strings.Contains(gateway, "Requires=storage-gateway-migrate.service") || !strings.Contains(gateway, "SG_MIGRATE_ON_START=false") {
		t.Error("the gateway unit must start after the migration unit and not migrate itself")
	}
	// The gateway reads its secret files only when no one else can: they are
	// mounted 0400 for the user it runs as.
	user := regexp.MustCompile(`(?m)^User=(\d+):(\d+)$`).FindStringSubmatch(gateway)
	if user == nil {
		t.Fatal("the gateway unit names no User=uid:gid")
	}
	for _, m := range regexp.MustCompile(`(?m)^Secret=.*type=mount.*$`).FindAllString(gateway, -1) {
		if !strings.Contains(m, "uid="+user[1]) || !strings.Contains(m, "mode=0400") {
			t.Errorf("%s: a secret file must be mode 0400 and owned by uid %s", m, user[1])
		}
	}
}
