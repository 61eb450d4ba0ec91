package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/testsupport/testcerts"
)

// TestConfigFilesLoad loads every tally.yaml the deployments ship with tally's own loader, the
// way the binaries will: an unknown key, a bad value or a TLS file that does not parse fails
// here, naming the key. Secrets come from the environment as in the containers; the example
// overlay's certificate paths (/etc/tally/tls) point at throwaway certificates.
func TestConfigFilesLoad(t *testing.T) {
	certs, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	b, err := os.ReadFile(filepath.Join("compose", "tally.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files["compose"] = string(b)
	files["k8s/base"] = build(t, "k8s/base").configFile(t)
	files["k8s/overlays/example"] = build(t, "k8s/overlays/example").configFile(t)

	env := map[string]string{
		"TALLY_CLICKHOUSE_PASSWORD":           secrets["CLICKHOUSE_PASSWORD"],
		"TALLY_REDIS_PASSWORD":                secrets["REDIS_PASSWORD"],
		"TALLY_COLLECTOR_AUTH_KEYS":           secrets["TALLY_COLLECTOR_AUTH_KEYS"],
		"TALLY_COLLECTOR_AUTH_USER_TOKEN_KEY": secrets["TALLY_COLLECTOR_AUTH_USER_TOKEN_KEY"],
	}
	tests := []struct {
		name        string
		extraEnv    map[string]string
		wantCluster string
		wantRF      int
	}{
		{"compose", nil, "", 1},
		{"k8s/base", nil, "", 0},
		{"k8s/overlays/example", map[string]string{"TALLY_KAFKA_SASL_PASSWORD": "kafka-secret"}, "tally", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			for k, v := range tt.extraEnv {
				t.Setenv(k, v)
			}
			text := strings.ReplaceAll(files[tt.name], "/etc/tally/tls/ca.pem", certs.CA)
			path := filepath.Join(t.TempDir(), "tally.yaml")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load("deploy-check", []string{"--config", path})
			if err != nil {
				t.Fatalf("load %s's tally.yaml: %v", tt.name, err)
			}
			if cfg.ClickHouse.Cluster != tt.wantCluster || cfg.Kafka.Replication != tt.wantRF {
				t.Errorf("got clickhouse.cluster %q, kafka.replication_factor %d; want %q, %d", cfg.ClickHouse.Cluster, cfg.Kafka.Replication, tt.wantCluster, tt.wantRF)
			}
			if len(cfg.Kafka.Brokers) == 0 || cfg.ClickHouse.Addr == "" || cfg.Redis.Addr == "" {
				t.Errorf("got brokers %v, clickhouse %q, redis %q; want real servers, never the embedded ones", cfg.Kafka.Brokers, cfg.ClickHouse.Addr, cfg.Redis.Addr)
			}
		})
	}
}

// settingKeys returns every setting key config.example.yaml lists (which lists them all), as
// dotted paths to its leaves.
func settingKeys(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	keys := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			keys[prefix+k] = true
		}
	}
	walk("", doc)
	return keys
}

// TestEnvNamesAreSettings: every TALLY_* variable docker-compose.yml and the Kubernetes builds
// set is a setting's environment name (or TALLY_CONFIG), so a misspelt one cannot be ignored
// silently, leaving the setting at its default.
func TestEnvNamesAreSettings(t *testing.T) {
	known := map[string]bool{"TALLY_CONFIG": true}
	for k := range settingKeys(t) {
		known[config.EnvName(k)] = true
	}
	if !known["TALLY_SINK_S3_ACCESS_KEY"] || !known["TALLY_TOPK_ADDR"] {
		t.Fatalf("got %d environment names from config.example.yaml, without sink.s3.access_key or topk.addr; want every setting", len(known))
	}
	used := map[string][]string{} // name -> where
	p, err := loadCompose(t, secrets)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range p.Services {
		for k := range s.Environment {
			used[k] = append(used[k], "docker-compose.yml "+name)
		}
	}
	for _, dir := range []string{"k8s/base", "k8s/overlays/example"} {
		for _, w := range build(t, dir).workloads() {
			for _, c := range w.spec.Containers {
				for _, e := range c.Env {
					used[e.Name] = append(used[e.Name], dir+" "+w.name)
				}
			}
		}
	}
	n := 0
	for name, where := range used {
		if !strings.HasPrefix(name, config.EnvPrefix+"_") {
			continue
		}
		n++
		if !known[name] {
			t.Errorf("%s (in %v) is no setting's environment name; want TALLY_ + a key of config.example.yaml", name, where)
		}
	}
	if n == 0 {
		t.Fatal("got no TALLY_* variables; want the deployments' secrets at least")
	}
}
