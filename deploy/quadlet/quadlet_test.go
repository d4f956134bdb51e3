// Package quadlet_test checks the Podman quadlet units against the binary
// and the operator's manual: they set only settings it reads, run it as the
// user its secret files are mounted for, migrate before it starts, trust
// DCM's network by the subnet the network unit pins; and the manual's
// install steps, run verbatim up to the container engine, make every
// secret, file and unit the units name, with which the units' commands
// work.
package quadlet_test

import (
	"bufio"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/test/docs"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	gatewayproc.Cleanup()
	os.Exit(code)
}

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

// unit is one quadlet file: its keys, per section, in order.
type unit map[string][][2]string

func parseUnit(t *testing.T, file string) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(read(t, file)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not key=value", file, line)
			}
			u[section] = append(u[section], [2]string{k, v})
		}
	}
	return u
}

// all is every value of key in section.
func (u unit) all(section, key string) []string {
	var out []string
	for _, kv := range u[section] {
		if kv[0] == key {
			out = append(out, kv[1])
		}
	}
	return out
}

func (u unit) one(section, key string) string {
	if v := u.all(section, key); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// options reads a Secret= or Volume= value's comma-separated options.
func options(v string) (name string, opts map[string]string) {
	fields := strings.Split(v, ",")
	opts = map[string]string{}
	for _, f := range fields[1:] {
		k, val, _ := strings.Cut(f, "=")
		opts[k] = val
	}
	return fields[0], opts
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
	// DCM's token-less manager is trusted by address: the network's pinned
	// subnet must hold every trusted network the example names.
	subnet, err := netip.ParsePrefix(parseUnit(t, "dcm.network").one("Network", "Subnet"))
	if err != nil {
		t.Fatalf("dcm.network pins no Subnet: %v", err)
	}
	trusted := regexp.MustCompile(`(?m)^SG_AUTH_DCM_TRUSTED_NETWORKS=(.*)$`).FindStringSubmatch(read(t, "storage-gateway.env.example"))
	if trusted == nil {
		t.Fatal("storage-gateway.env.example trusts no DCM network")
	}
	for _, cidr := range strings.Split(trusted[1], ",") {
		p, err := netip.ParsePrefix(cidr)
		if err != nil || !subnet.Contains(p.Addr()) || p.Bits() < subnet.Bits() {
			t.Errorf("the example trusts %s, outside dcm.network's subnet %s (%v)", cidr, subnet, err)
		}
	}
}

// podmanStandIn does what `podman secret create [--replace] NAME FILE|-`
// does to the secret store (one file per secret) and refuses anything else,
// as podman refuses a name in use without --replace.
const podmanStandIn = `#!/bin/sh
set -eu
if [ "$#" -lt 4 ] || [ "$1" != secret ] || [ "$2" != create ]; then
	echo "podman stand-in: only 'podman secret create' belongs in these steps, not: podman $*" >&2; exit 125
fi
shift 2
replace=
if [ "$1" = --replace ]; then replace=1; shift; fi
name=$1 src=$2
if [ -e "$SECRETS/$name" ] && [ -z "$replace" ]; then
	echo "Error: $name: secret name in use" >&2; exit 125
fi
if [ "$src" = - ]; then cat > "$SECRETS/$name"; else cat "$src" > "$SECRETS/$name"; fi
`

// systemctlStandIn records what it is asked.
const systemctlStandIn = `#!/bin/sh
echo "$*" >> "$SECRETS/../systemctl.log"
`

// The manual's Podman steps, run verbatim but for /etc (a temporary
// directory) and with stand-ins for podman's secret store and systemctl,
// leave every secret, environment file and unit the units name; then the
// units' commands, given those secrets as podman would (the database and
// NATS are the test's: the units' hosts exist on DCM's network only),
// migrate, serve, become ready and take the admin token the steps printed.
func TestInstallWithPodmanAsWritten(t *testing.T) {
	binary := gatewayproc.Binary(t)
	root, bin, secrets := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, script := range map[string]string{"podman": podmanStandIn, "systemctl": systemctlStandIn} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	blocks := docs.Blocks(t, "deploy/README.md", "podman")
	if len(blocks) != 1 {
		t.Fatalf("deploy/README.md has %d podman blocks, want 1", len(blocks))
	}
	block := strings.ReplaceAll(blocks[0], "/etc/", root+"/etc/")
	out, err := docs.Run(t.Context(), filepath.Join("..", ".."), append(os.Environ(), "PATH="+bin+":"+filepath.Dir(binary)+":"+os.Getenv("PATH"),
		"SECRETS="+secrets), block)
	if err != nil {
		t.Fatalf("the Podman steps failed: %v", err)
	}
	token := regexp.MustCompile(`(?m)^sgw_\S+$`).FindString(out)
	if token == "" {
		t.Fatalf("the steps printed no admin token:\n%s", out)
	}
	if log := read(t, filepath.Join(secrets, "..", "systemctl.log")); log != "daemon-reload\nstart storage-gateway\n" {
		t.Errorf("systemctl was asked %q", log)
	}
	units := filepath.Join(root, "etc", "containers", "systemd")
	for _, name := range []string{"storage-gateway.container", "storage-gateway-migrate.container", "dcm.network"} {
		if read(t, filepath.Join(units, name)) != read(t, name) {
			t.Errorf("%s is not installed in /etc/containers/systemd", name)
		}
	}
	db, nats := pgtest.NewDatabase(t).URL, natstest.Start(t).URL
	state := t.TempDir()
	run := func(name string) (args, env []string) {
		u := parseUnit(t, filepath.Join(units, name))
		if u.one("Container", "Network") != "dcm.network" {
			t.Errorf("%s is not on dcm.network", name)
		}
		for _, e := range u.all("Container", "Environment") {
			env = append(env, strings.Fields(e)...)
		}
		if file := u.one("Container", "EnvironmentFile"); file != "" {
			for _, line := range strings.Split(read(t, strings.Replace(file, "/etc/", root+"/etc/", 1)), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					env = append(env, line)
				}
			}
		}
		mounted := t.TempDir()
		paths := []string{}
		for _, s := range u.all("Container", "Secret") {
			secret, opts := options(s)
			value, err := os.ReadFile(filepath.Join(secrets, secret))
			if err != nil {
				t.Fatalf("%s uses secret %s, which the steps did not create", name, secret)
			}
			switch opts["type"] {
			case "env":
				env = append(env, opts["target"]+"="+string(value))
			case "mount":
				file := filepath.Join(mounted, filepath.Base(opts["target"]))
				if err := os.WriteFile(file, value, 0o400); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, opts["target"], file)
			default:
				t.Fatalf("%s: secret %s of type %q", name, secret, opts["type"])
			}
		}
		for _, v := range u.all("Container", "Volume") {
			_, target, _ := strings.Cut(v, ":")
			paths = append(paths, target, state)
		}
		mount := strings.NewReplacer(paths...)
		for i, kv := range env {
			env[i] = mount.Replace(kv)
			if k, v, _ := strings.Cut(kv, "="); k == "SG_DATABASE_URL" {
				if u, err := url.Parse(v); err != nil || u.Scheme != "postgres" || u.Host == "" {
					t.Errorf("SG_DATABASE_URL from the secret is not a Postgres URL: %v", err)
				}
			}
		}
		// The test's database, NATS and a free port.
		env = append(env, "HOME="+t.TempDir(), "SG_DATABASE_URL="+db, "SG_NATS_URL="+nats, "SG_LISTEN_ADDR=127.0.0.1:0")
		return strings.Fields(u.one("Container", "Exec")), env
	}

	args, env := run("storage-gateway-migrate.container")
	migrate := exec.Command(binary, args...)
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("the migrate unit's %v: %v\n%s", args, err, out)
	}
	args, env = run("storage-gateway.container")
	if !slices.Equal(args, []string{"serve"}) {
		t.Fatalf("the gateway unit runs %v", args)
	}
	g := gatewayproc.Start(t, binary, append(env, "SG_GATEWAY_TOKEN="+token))
	g.WaitOK(t, "/readyz", "")
	g.WaitOK(t, "/api/v1alpha1/environments", token)
}
