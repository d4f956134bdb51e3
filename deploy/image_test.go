// Package deploy_test proves what ships as an image without a container
// engine: deploy/Containerfile's build stage is reproduced from its own
// instructions — its context made from its COPY lines in an empty
// directory, its RUN lines run there — so a binary that imports anything
// the image does not copy fails here; the final stage is checked against
// what that build produced; and compose.yaml's services are run as the
// compose file says, with that binary.
package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dcm-project/storage-gateway/test/repo"

	"sigs.k8s.io/yaml"

	"github.com/dcm-project/storage-gateway/internal/config"
	"github.com/dcm-project/storage-gateway/test/gatewayproc"
	"github.com/dcm-project/storage-gateway/test/natstest"
	"github.com/dcm-project/storage-gateway/test/pgtest"
)

// instruction is one line of a Containerfile, continuations joined.
type instruction struct {
	op   string // upper case: FROM, COPY, RUN, ...
	args string
}

// stage is one FROM ... [AS name] and what follows it.
type stage struct {
	name         string
	instructions []instruction
}

func parseContainerfile(file string) ([]stage, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var stages []stage
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if line == "" && (text == "" || strings.HasPrefix(text, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(text, "\\"); ok {
			line += cont + " "
			continue
		}
		line += text
		op, args, _ := strings.Cut(line, " ")
		line = ""
		in := instruction{op: strings.ToUpper(op), args: strings.TrimSpace(args)}
		if in.op == "FROM" {
			fields := strings.Fields(in.args)
			name := ""
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				name = fields[2]
			}
			stages = append(stages, stage{name: name})
			continue
		}
		if len(stages) == 0 {
			return nil, fmt.Errorf("%s: %s before FROM", file, in.op)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
	}
	return stages, sc.Err()
}

// copyArgs splits a COPY's arguments into its --flags, sources and
// destination.
func copyArgs(args string) (flags map[string]string, sources []string, dest string) {
	flags = map[string]string{}
	fields := strings.Fields(args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(fields[0], "--"), "=")
		flags[k] = v
		fields = fields[1:]
	}
	return flags, fields[:len(fields)-1], fields[len(fields)-1]
}

// built is the result of reproducing the Containerfile's build stage.
type built struct {
	stages  []stage
	workdir string // the build stage's WORKDIR, as the image names it
	dir     string // where it was reproduced
	err     error
}

// buildArgs are the build arguments the test passes, as a release would.
var buildArgs = map[string]string{"VERSION": "v0.0.0-imagetest", "COMMIT": "0123456789abcdef"}

var buildOnce = sync.OnceValue(func() *built {
	b := &built{}
	b.dir, b.err = os.MkdirTemp("", "sg-image-")
	if b.err == nil {
		b.err = b.reproduce()
	}
	return b
})

// reproduce makes the build stage's context from its COPY lines in an empty
// directory and runs its RUN lines there with its ARGs — as the container
// engine does, minus the container. An instruction it does not know fails
// the test rather than being skipped: teach it first.
func (b *built) reproduce() error {
	root := repo.Root()
	file := filepath.Join(root, "deploy", "Containerfile")
	var err error
	if b.stages, err = parseContainerfile(file); err != nil {
		return err
	}
	if len(b.stages) < 2 || b.stages[0].name == "" {
		return fmt.Errorf("%s: want a named build stage and a final stage", file)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOFLAGS=") })
	// The image's build has no .git and the machine's go settings do not
	// reach it.
	env = append(env, "GOFLAGS=-buildvcs=false")
	for _, in := range b.stages[0].instructions {
		switch in.op {
		case "WORKDIR":
			b.workdir = in.args
		case "COPY":
			flags, sources, dest := copyArgs(in.args)
			if len(flags) > 0 {
				return fmt.Errorf("COPY %s: flags in the build stage are not reproduced here", in.args)
			}
			for _, src := range sources {
				if err := copyIn(filepath.Join(root, src), filepath.Join(b.dir, dest), strings.HasSuffix(dest, "/") || len(sources) > 1); err != nil {
					return fmt.Errorf("COPY %s: %w", in.args, err)
				}
			}
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			value, ok := buildArgs[name]
			if !ok {
				value = def
			}
			env = append(env, name+"="+value)
		case "RUN":
			cmd := exec.Command("sh", "-c", in.args)
			cmd.Dir, cmd.Env = b.dir, env
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("RUN %s: %w\n%s", in.args, err, out)
			}
		default:
			return fmt.Errorf("%s in the build stage: this test does not reproduce it", in.op)
		}
	}
	return nil
}

// copyIn copies src as COPY does: a directory's contents into dest, a file
// to dest — or into it, when dest names a directory (a trailing slash, or
// several sources).
func copyIn(src, dest string, intoDir bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return err
		}
		src += "/."
	} else {
		if intoDir {
			dest = filepath.Join(dest, filepath.Base(src))
		}
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
	}
	if out, err := exec.Command("cp", "-R", src, dest).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// image reproduces the build (once per test binary) and returns it.
func image(t *testing.T) *built {
	t.Helper()
	b := buildOnce()
	if b.err != nil {
		t.Fatalf("deploy/Containerfile's build stage fails in its own context (does the binary import a package the image does not COPY?): %v", b.err)
	}
	return b
}

// fromBuild maps a path of the build stage (absolute, under its WORKDIR)
// to the reproduction.
func (b *built) fromBuild(t *testing.T, p string) string {
	t.Helper()
	rel, ok := strings.CutPrefix(path.Clean(p), path.Clean(b.workdir)+"/")
	if !ok {
		t.Fatalf("%s is outside the build stage's WORKDIR %s", p, b.workdir)
	}
	return filepath.Join(b.dir, rel)
}

// finalImage is what the final stage declares.
type finalImage struct {
	copies     map[string]string // destination → built file
	chown      map[string]string // destination → --chown
	env        map[string]string
	volumes    []string
	user       string
	entrypoint []string
	cmd        []string
}

func (b *built) final(t *testing.T) finalImage {
	t.Helper()
	f := finalImage{copies: map[string]string{}, chown: map[string]string{}, env: map[string]string{}}
	for _, in := range b.stages[len(b.stages)-1].instructions {
		switch in.op {
		case "COPY":
			flags, sources, dest := copyArgs(in.args)
			if flags["from"] != b.stages[0].name || len(sources) != 1 {
				t.Fatalf("COPY %s: the final stage copies one path at a time from the build stage", in.args)
			}
			f.copies[dest] = b.fromBuild(t, sources[0])
			f.chown[dest] = flags["chown"]
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(kv, "=")
				f.env[k] = v
			}
		case "VOLUME":
			f.volumes = append(f.volumes, strings.Fields(in.args)...)
		case "USER":
			f.user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &f.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: %v", in.args, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(in.args), &f.cmd); err != nil {
				t.Fatalf("CMD %s: %v", in.args, err)
			}
		case "EXPOSE":
		default:
			t.Fatalf("%s in the final stage: this test does not check it", in.op)
		}
	}
	return f
}

// binary is the entrypoint the image runs, as built.
func (f finalImage) binary(t *testing.T) string {
	t.Helper()
	if len(f.entrypoint) != 1 || f.copies[f.entrypoint[0]] == "" {
		t.Fatalf("ENTRYPOINT %v is not a file the final stage copies from the build", f.entrypoint)
	}
	return f.copies[f.entrypoint[0]]
}

func TestMain(m *testing.M) {
	code := m.Run()
	if b := buildOnce(); b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
	gatewayproc.Cleanup()
	os.Exit(code)
}

// The image builds from what its Containerfile copies, prints the version
// and commit it was given, and runs as the user that owns its state
// directory.
func TestImageBuildsFromItsOwnContext(t *testing.T) {
	b := image(t)
	f := b.final(t)
	for dest, src := range f.copies {
		if _, err := os.Stat(src); err != nil {
			t.Errorf("the final stage copies %s from the build, which did not produce it: %v", dest, err)
		}
	}
	bin := f.binary(t)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		want := fmt.Sprintf("storage-gateway %s (commit %s, go", buildArgs["VERSION"], buildArgs["COMMIT"])
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%v: %v %q, want %q...", args, err, out, want)
		}
	}
	if len(f.cmd) != 1 || f.cmd[0] != "serve" {
		t.Errorf("CMD %v, want [serve]", f.cmd)
	}
	// The state directory: declared a volume, named by SG_STATE_DIR, made
	// by the build and owned by the user the image runs as — so a fresh
	// volume there is writable for the gateway.
	state := f.env["SG_STATE_DIR"]
	uid, _, _ := strings.Cut(f.user, ":")
	if uid == "" || uid == "0" || uid == "root" {
		t.Errorf("USER %q: the image must run as a non-root uid", f.user)
	}
	switch {
	case state == "" || !slices.Contains(f.volumes, state):
		t.Errorf("SG_STATE_DIR=%q is not a VOLUME (%v)", state, f.volumes)
	case f.copies[state] == "":
		t.Errorf("nothing creates %s in the image: a volume there would be root's", state)
	case f.chown[state] != f.user:
		t.Errorf("%s is copied with --chown=%q, not the image's user %q", state, f.chown[state], f.user)
	}
	if fi, err := os.Stat(f.copies[state]); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the state directory as built: %v, %v; want a directory of mode 0700", fi, err)
	}
	for name := range f.env {
		if strings.HasPrefix(name, "SG_") && !slices.Contains(config.Variables(), name) {
			t.Errorf("the image sets %s, which internal/config does not read", name)
		}
	}
}

// compose is what the test reads of compose.yaml.
type compose struct {
	Services map[string]struct {
		Image string `json:"image"`
		Build *struct {
			Context    string `json:"context"`
			Dockerfile string `json:"dockerfile"`
		} `json:"build"`
		Command     []string          `json:"command"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
		DependsOn   map[string]struct {
			Condition string `json:"condition"`
		} `json:"depends_on"`
	} `json:"services"`
}

// compose.yaml runs as written: its one-shot services create, with the
// image's binary and as its user would, the key ring and token file the
// gateway service names; that service's settings are all known; and the
// gateway started with them (database and NATS are the test's, for the
// compose file's own hosts do not exist here) is ready and takes the token
// the admin-token service printed.
func TestComposeRunsTheImageAsWritten(t *testing.T) {
	b := image(t)
	f := b.final(t)
	bin := f.binary(t)
	raw, err := os.ReadFile(filepath.Join(repo.Root(), "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	// Each named volume is a fresh directory, as the engine makes it from
	// the image's directory at that path: writable by the image's user
	// (which this test runs as) only if the image made it so.
	volumes := map[string]string{}
	mounts := func(svc string, vols []string) *strings.Replacer {
		var pairs []string
		for _, v := range vols {
			name, target, _ := strings.Cut(v, ":")
			if volumes[name] == "" {
				volumes[name] = t.TempDir()
				if err := os.Chmod(volumes[name], 0o700); err != nil {
					t.Fatal(err)
				}
				if f.copies[target] == "" || f.chown[target] != f.user {
					t.Errorf("service %s mounts volume %s at %s, which the image does not create for its user %s", svc, name, target, f.user)
				}
			}
			pairs = append(pairs, target, volumes[name])
		}
		return strings.NewReplacer(pairs...)
	}
	var gatewayName string
	oneShots := map[string]string{} // service → its output
	names := make([]string, 0, len(c.Services))
	for name := range c.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		s := c.Services[name]
		if s.Build == nil {
			continue
		}
		if s.Build.Context != "." || s.Build.Dockerfile != "deploy/Containerfile" {
			t.Fatalf("service %s builds %+v, not deploy/Containerfile from the repository", name, s.Build)
		}
		if len(s.Command) == 0 || s.Command[0] == "serve" {
			gatewayName = name
			continue
		}
		paths := mounts(name, s.Volumes)
		args := make([]string, len(s.Command))
		for i, a := range s.Command {
			args[i] = paths.Replace(a)
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("service %s (%v): %v\n%s", name, s.Command, err, out)
		}
		oneShots[name] = string(out)
	}
	if gatewayName == "" {
		t.Fatal("no service serves the gateway")
	}
	gw := c.Services[gatewayName]
	for name := range oneShots {
		if gw.DependsOn[name].Condition != "service_completed_successfully" {
			t.Errorf("%s starts without waiting for %s to complete", gatewayName, name)
		}
	}
	paths := mounts(gatewayName, gw.Volumes)
	env := []string{"HOME=" + t.TempDir(), "SG_LISTEN_ADDR=127.0.0.1:0"}
	for k, v := range f.env {
		if k != "SG_LISTEN_ADDR" {
			env = append(env, k+"="+paths.Replace(v))
		}
	}
	for k, v := range gw.Environment {
		if !slices.Contains(config.Variables(), k) {
			t.Errorf("service %s sets %s, which internal/config does not read", gatewayName, k)
		}
		switch k {
		case "SG_DATABASE_URL", "SG_NATS_URL": // compose's own hosts
		default:
			env = append(env, k+"="+paths.Replace(v))
		}
	}
	token := ""
	for name, out := range oneShots {
		if strings.HasPrefix(gatewayproc.LastLine(out), "sgw_") {
			token = gatewayproc.LastLine(out)
			t.Logf("the admin token is the last line of `docker compose logs %s`", name)
		}
	}
	if token == "" {
		t.Fatal("no one-shot service prints an admin token")
	}
	g := gatewayproc.Start(t, bin, append(env, "SG_DATABASE_URL="+pgtest.NewDatabase(t).URL, "SG_NATS_URL="+natstest.Start(t).URL,
		"SG_GATEWAY_TOKEN="+token))
	g.WaitOK(t, "/readyz", "")
	g.WaitOK(t, "/api/v1alpha1/environments", token)
}
