package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/platform/chclient"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// root is the repository's top directory, where docker-compose.yml and the Dockerfile are.
const root = ".."

// secrets are the values .env must give docker-compose.yml; the tests set stand-ins.
var secrets = map[string]string{
	"CLICKHOUSE_PASSWORD":                 "pipeline-secret",
	"CLICKHOUSE_DASHBOARDS_PASSWORD":      "dashboards-secret",
	"REDIS_PASSWORD":                      "redis-secret",
	"TALLY_COLLECTOR_AUTH_KEYS":           "k1:" + strings.Repeat("ab", 32) + ":ingest:1000:2000",
	"TALLY_COLLECTOR_AUTH_USER_TOKEN_KEY": strings.Repeat("k", 32),
	"GRAFANA_ADMIN_PASSWORD":              "grafana-secret",
}

func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(abs, "docker-compose.yml"), Content: b}},
		Environment: env,
	}, func(o *loader.Options) { o.SetProjectName("tally", true) })
}

// components are the production binaries: every top-level dir D with D/cmd/D, except the
// all-in-one (pipeline), which embeds the infrastructure and is not deployed.
func components(t *testing.T) []string {
	t.Helper()
	mains, err := filepath.Glob(filepath.Join(root, "*", "cmd", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range mains {
		parts := strings.Split(filepath.ToSlash(m), "/")
		mod, cmd := parts[len(parts)-4], parts[len(parts)-2]
		if mod == cmd && mod != "pipeline" {
			out = append(out, mod)
		}
	}
	sort.Strings(out)
	return out
}

// dockerfileTargets returns the stages of the Dockerfile and the components its build stage
// compiles.
func dockerfileTargets(t *testing.T) (stages, built []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?im)^FROM\s+\S+\s+AS\s+(\S+)\s*$`).FindAllStringSubmatch(string(b), -1) {
		stages = append(stages, m[1])
	}
	loop := regexp.MustCompile(`for c in ([a-z ]+); do`).FindStringSubmatch(string(b))
	if loop == nil {
		t.Fatal("Dockerfile: got no `for c in ...; do` build loop; want one naming every component")
	}
	built = strings.Fields(loop[1])
	sort.Strings(built)
	return stages, built
}

// pinnedRe is an image reference pinned to a full version (x.y.z), never a moving tag.
var pinnedRe = regexp.MustCompile(`^[a-z0-9./-]+:v?\d+\.\d+\.\d+(\.\d+)?(-[a-z0-9.]+)?$`)

func TestComposeLoads(t *testing.T) {
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	wantServices := append([]string{"kafka", "clickhouse", "redis", "prometheus", "grafana", "batchjob"}, components(t)...)
	for _, s := range wantServices {
		if _, ok := p.Services[s]; !ok {
			t.Errorf("got no service %s; want every component and server as a service", s)
		}
	}
}

func TestComposeRequiresSecrets(t *testing.T) {
	env := map[string]string{}
	for k, v := range secrets {
		if k != "REDIS_PASSWORD" {
			env[k] = v
		}
	}
	_, err := loadCompose(t, env)
	if err == nil || !strings.Contains(err.Error(), "REDIS_PASSWORD") {
		t.Fatalf("got %v; want loading to fail naming REDIS_PASSWORD", err)
	}
}

func TestComposeServices(t *testing.T) {
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatal(err)
	}
	stages, built := dockerfileTargets(t)
	comps := components(t)
	if !slices.Equal(built, comps) {
		t.Errorf("Dockerfile builds %v; want the components %v", built, comps)
	}
	for _, c := range append(slices.Clone(comps), "batchjob-cron") {
		if !slices.Contains(stages, c) {
			t.Errorf("Dockerfile: got no target %s; want one per component", c)
		}
	}
	for name, s := range p.Services {
		t.Run(name, func(t *testing.T) {
			if s.Build != nil {
				if !slices.Contains(stages, s.Build.Target) || s.Build.Target == "build" || s.Build.Target == "base" {
					t.Errorf("build target %q; want a component target of the Dockerfile %v", s.Build.Target, stages)
				}
				if filepath.Base(s.Build.Dockerfile) != "Dockerfile" {
					t.Errorf("dockerfile %q; want the one Dockerfile", s.Build.Dockerfile)
				}
			} else if !pinnedRe.MatchString(s.Image) {
				t.Errorf("image %q; want an official image pinned to a full version", s.Image)
			}
			hc := s.HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) == 0 {
				t.Fatalf("got no healthcheck; want one on every service")
			}
			if s.Build != nil && s.Build.Target != "batchjob-cron" && !strings.Contains(strings.Join(hc.Test, " "), "/readyz") {
				t.Errorf("healthcheck %v; want the component's /readyz", hc.Test)
			}
			for dep, d := range s.DependsOn {
				if d.Condition != types.ServiceConditionHealthy && d.Condition != types.ServiceConditionCompletedSuccessfully {
					t.Errorf("depends_on %s: condition %q; want service_healthy", dep, d.Condition)
				}
			}
			if s.Build != nil && len(s.DependsOn) == 0 {
				t.Errorf("got no depends_on; want the servers it needs, healthy")
			}
			for _, v := range s.Volumes {
				if v.Type == types.VolumeTypeBind {
					if _, err := os.Stat(v.Source); err != nil {
						t.Errorf("bind mount %s: %v", v.Source, err)
					}
				}
			}
		})
	}
}

// TestComposeKeepsServerData: every server's data lives in a named volume, so recreating a
// container (an upgrade) keeps it.
func TestComposeKeepsServerData(t *testing.T) {
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatal(err)
	}
	dataDirs := map[string]string{
		"kafka":      "/var/lib/kafka/data",
		"clickhouse": "/var/lib/clickhouse",
		"redis":      "/data",
		"prometheus": "/prometheus",
		"grafana":    "/var/lib/grafana",
		"sink":       "/var/lib/tally/sink",
		"topk":       "/var/lib/tally/topk",
	}
	for svc, dir := range dataDirs {
		s, ok := p.Services[svc]
		if !ok {
			t.Errorf("got no service %s", svc)
			continue
		}
		found := false
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeVolume && v.Target == dir {
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s: volume %s is not declared", svc, v.Source)
				}
				found = true
			}
		}
		if !found {
			t.Errorf("%s: got no named volume at %s; want its data kept across container restarts", svc, dir)
		}
	}
}

// TestDockerfileImages: the images are built from pinned base images, their binaries are static
// (no libc needed on the small base), and every component's image runs as a non-root user
// inherited from the one base stage.
func TestDockerfileImages(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG\s+(\w+)=(\S+)\s*$`).FindAllStringSubmatch(text, -1) {
		args[m[1]] = m[2]
	}
	from := map[string]string{} // stage -> what it is built FROM, ARGs expanded
	for _, m := range regexp.MustCompile(`(?im)^FROM\s+(\S+)\s+AS\s+(\S+)\s*$`).FindAllStringSubmatch(text, -1) {
		image := m[1]
		if a, ok := strings.CutPrefix(image, "${"); ok {
			image = args[strings.TrimSuffix(a, "}")]
		}
		from[m[2]] = image
	}
	for _, stage := range []string{"build", "base"} {
		if !pinnedRe.MatchString(from[stage]) {
			t.Errorf("stage %s is FROM %q; want an image pinned to a full version", stage, from[stage])
		}
	}
	if !regexp.MustCompile(`(?m)^ENV\s+.*\bCGO_ENABLED=0\b`).MatchString(text) {
		t.Errorf("got no ENV CGO_ENABLED=0 in the build stage; want static binaries")
	}
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)\s*$`).FindAllStringSubmatch(text, -1)
	if len(user) != 1 || strings.HasPrefix(user[0][1], "0") || strings.HasPrefix(user[0][1], "root") {
		t.Errorf("got USER lines %v; want one, in the base stage, naming a non-root uid", user)
	}
	// Every component target descends from base (directly or through another component).
	for _, c := range append(components(t), "batchjob-cron") {
		stage, seen := c, 0
		for stage != "base" && seen < len(from) {
			stage, seen = from[stage], seen+1
		}
		if stage != "base" {
			t.Errorf("target %s does not descend from the base stage (FROM %q); want the non-root base", c, from[c])
		}
	}
}

// TestGrafanaPluginPinned: Grafana installs the ClickHouse data source plugin at a pinned version,
// the one the provisioned data source and the dashboards are written for.
func TestGrafanaPluginPinned(t *testing.T) {
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if p := p.Services["grafana"].Environment["GF_PLUGINS_PREINSTALL_SYNC"]; p != nil {
		v = *p
	}
	if !regexp.MustCompile(`(^|,)grafana-clickhouse-datasource@\d+\.\d+\.\d+(,|$)`).MatchString(v) {
		t.Errorf("grafana GF_PLUGINS_PREINSTALL_SYNC = %q; want grafana-clickhouse-datasource@<x.y.z>", v)
	}
}

// TestComposeClickHouseIsTheTestedRelease: compose runs the ClickHouse release the tests run
// (chDB's engine), so the SQL the tests check is the SQL users' servers run.
func TestComposeClickHouseIsTheTestedRelease(t *testing.T) {
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatal(err)
	}
	image := p.Services["clickhouse"].Image
	_, tag, _ := strings.Cut(image, ":")
	shipped := strings.SplitN(strings.TrimSuffix(tag, "-alpine"), ".", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := chclient.Open(ctx, chclient.Options{Addr: engine.Addr(), Database: "default", Username: "default", Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	tested := strings.SplitN(version, ".", 4)
	if len(shipped) < 3 || len(tested) < 3 || !slices.Equal(shipped[:3], tested[:3]) {
		t.Errorf("compose runs %s; the tests run ClickHouse %s; want the same release (x.y.z)", image, version)
	}
}

// `docker compose up --scale aggregator=N` runs N group members: the shared config names no
// static member id, and each container's entrypoint passes its own host name as one (a real
// shell runs the entrypoint here, with a stand-in binary that prints its arguments).
func TestComposeScalesAggregators(t *testing.T) {
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := p.Services["aggregator"]
	if !ok {
		t.Fatal("got no aggregator service")
	}
	ep := []string(s.Entrypoint)
	if len(ep) != 4 || ep[0] != "/bin/sh" || ep[1] != "-c" {
		t.Fatalf("entrypoint %q; want /bin/sh -c SCRIPT aggregator", ep)
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "aggregator")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nprintf '%s|' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := strings.Replace(ep[2], "/usr/local/bin/aggregator", stub, 1)
	for _, host := range []string{"3f2a9c1d0b7e", "5e81aa04c2d9"} {
		cmd := exec.Command("/bin/sh", "-c", script, ep[3], "--aggregator.addr", "0.0.0.0:8081")
		cmd.Env = []string{"HOSTNAME=" + host}
		out, err := cmd.Output()
		if want := "--aggregator.instance_id|" + host + "|--aggregator.addr|0.0.0.0:8081|"; err != nil || string(out) != want {
			t.Errorf("container %s runs the aggregator with %q (%v); want %q", host, out, err, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "tally.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Aggregator map[string]any `json:"aggregator"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if id, set := cfg.Aggregator["instance_id"]; set {
		t.Errorf("deploy/compose/tally.yaml sets aggregator.instance_id %v; want none (every replica reads the file)", id)
	}
}
