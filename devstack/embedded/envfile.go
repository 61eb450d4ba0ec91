package embedded

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"tally/platform/config"
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
	s := secrets{kafka: env["TALLY_KAFKA_SASL_PASSWORD"], clickhouse: env["TALLY_CLICKHOUSE_PASSWORD"], redis: env["TALLY_REDIS_PASSWORD"]}
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
	if run.kafka {
		sasl := cfg.Kafka.SASL
		lines = append(lines, "TALLY_KAFKA_BROKERS="+strings.Join(cfg.Kafka.Brokers, ","), "TALLY_KAFKA_SASL_MECHANISM="+sasl.Mechanism,
			"TALLY_KAFKA_SASL_USERNAME="+sasl.Username, "TALLY_KAFKA_SASL_PASSWORD="+sasl.Password)
	}
	if run.clickhouse {
		lines = append(lines, "TALLY_CLICKHOUSE_ADDR="+cfg.ClickHouse.Addr, "TALLY_CLICKHOUSE_USERNAME="+cfg.ClickHouse.Username,
			"TALLY_CLICKHOUSE_PASSWORD="+cfg.ClickHouse.Password)
	}
	if run.redis {
		lines = append(lines, "TALLY_REDIS_ADDR="+cfg.Redis.Addr, "TALLY_REDIS_PASSWORD="+cfg.Redis.Password)
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
