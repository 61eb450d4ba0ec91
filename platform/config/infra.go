package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Servers names the servers a binary connects to.
type Servers struct {
	Kafka, ClickHouse, Redis bool
}

// InfraEnvFile is where, under the data directory, the embedded stack (`pipeline run` or
// `pipeline infra`) writes its servers' addresses and passwords as TALLY_* lines.
const InfraEnvFile = "infra.env"

// RequireServers refuses to go on without an address for each server in need. A component
// binary never embeds infrastructure, and the embedded stack's loopback addresses are no
// default for it: on a production host they would reach nothing, or the wrong thing.
func (c *Config) RequireServers(need Servers) error {
	var missing []string
	if need.Kafka && len(c.Kafka.Brokers) == 0 {
		missing = append(missing, "kafka.brokers")
	}
	if need.ClickHouse && c.ClickHouse.Addr == "" {
		missing = append(missing, "clickhouse.addr")
	}
	if need.Redis && c.Redis.Addr == "" {
		missing = append(missing, "redis.addr")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("config: %s: not set; this binary connects only to servers it is given (for `pipeline infra` on this machine: set -a; . %s; set +a)",
		strings.Join(missing, ", "), filepath.Join(c.DataDir, InfraEnvFile))
}
