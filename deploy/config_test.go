package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tally/platform/config"
	"tally/platform/testcerts"
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
