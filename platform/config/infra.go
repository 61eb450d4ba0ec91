package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RedisAddrFile is where, under the data directory, the embedded Redis writes its address.
const RedisAddrFile = "redis/addr"

// UseInfraDefaults points a standalone component, which never embeds infrastructure, at the
// embedded infrastructure of a `pipeline infra` process on the same data directory when an
// address is not configured: the embedded Kafka and ClickHouse listen addresses, and the Redis
// address that process wrote under the data directory.
func (c *Config) UseInfraDefaults() error {
	if len(c.Kafka.Brokers) == 0 {
		c.Kafka.Brokers = []string{c.Kafka.EmbeddedAddr}
	}
	if c.ClickHouse.Addr == "" {
		c.ClickHouse.Addr = c.ClickHouse.EmbeddedAddr
	}
	if c.Redis.Addr == "" {
		b, err := os.ReadFile(filepath.Join(c.DataDir, RedisAddrFile))
		if err != nil {
			return fmt.Errorf("config: redis.addr: not set, and no embedded Redis address in %s (start `pipeline infra` or set redis.addr): %w", c.DataDir, err)
		}
		c.Redis.Addr = strings.TrimSpace(string(b))
	}
	return nil
}
