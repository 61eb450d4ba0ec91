package embedded

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tallypipeline/tally/platform/config"
)

// EnvFile is where, under the data directory, the embedded stack keeps its generated passwords
// and the addresses it listens on, as TALLY_* lines: component binaries on this machine connect
// to it after `set -a; . <data_dir>/infra.env; set +a`. Mode 0600: the passwords are the
// Kafka user's, the engine's administrator's and Redis's.
const EnvFile = config.InfraEnvFile

// secrets are the passwords the embedded stack generates once per data directory: read from
// the env file an earlier start wrote, generated where it has none (the first start, or a file
// deleted to rotate them).
type secrets struct{ kafka, clickhouse, redis string }

func loadSecrets(dataDir string) (secrets, error) {
	env, err := ReadEnvFile(dataDir)
	if err != nil && !os.IsNotExist(err) {
		return secrets{}, err
	}
	s := secrets{kafka: env[config.EnvName("kafka.sasl.password")], clickhouse: env[config.EnvName("clickhouse.password")], redis: env[config.EnvName("redis.password")]}
	for _, p := range []*string{&s.kafka, &s.clickhouse, &s.redis} {
		if *p == "" {
			*p = rand.Text()
		}
	}
	return s, nil
}

// ReadEnvFile returns the KEY=value lines of the data directory's env file.
func ReadEnvFile(dataDir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, EnvFile))
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	return env, err
}

// writeEnvFile writes what a component needs to reach the servers the embedded stack started,
// replacing the file whole so that no reader sees half of it.
func writeEnvFile(cfg *config.Config, run started) (string, error) {
	lines := []string{"# tally's embedded servers, rewritten at each start. Secret: keep it mode 0600."}
	set := func(key, value string) { lines = append(lines, config.EnvName(key)+"="+value) }
	if run.kafka {
		set("kafka.brokers", strings.Join(cfg.Kafka.Brokers, ","))
		set("kafka.sasl.mechanism", cfg.Kafka.SASL.Mechanism)
		set("kafka.sasl.username", cfg.Kafka.SASL.Username)
		set("kafka.sasl.password", cfg.Kafka.SASL.Password)
	}
	if run.clickhouse {
		set("clickhouse.addr", cfg.ClickHouse.Addr)
		set("clickhouse.username", cfg.ClickHouse.Username)
		set("clickhouse.password", cfg.ClickHouse.Password)
	}
	if run.redis {
		set("redis.addr", cfg.Redis.Addr)
		set("redis.password", cfg.Redis.Password)
	}
	path := filepath.Join(cfg.DataDir, EnvFile)
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // WriteFile's mode applies only to a file it creates
	err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
