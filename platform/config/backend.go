package config

import (
	"github.com/tallypipeline/tally/platform/tlsconf"
)

// validateBackendSecurity checks the credentials and TLS settings of Kafka, Redis and
// ClickHouse: a mechanism tally speaks, credentials complete, TLS files readable. They apply to
// configured servers only; the embedded ones take neither, so setting them without an address
// is a mistake, not a no-op.
func (c Config) validateBackendSecurity(bad Bad) {
	if _, err := c.Kafka.Security().Mechanism(); err != nil {
		bad("kafka.sasl", "%v", err)
	}
	checkTLS(bad, "kafka.tls", c.Kafka.TLS)
	checkTLS(bad, "redis.tls", c.Redis.TLS)
	checkTLS(bad, "clickhouse.tls", c.ClickHouse.TLS)
	if c.Redis.Username != "" && c.Redis.Password == "" {
		bad("redis.password", "is empty but redis.username %q is set", c.Redis.Username)
	}
	embedded := func(key string, on bool, addrKey string) {
		if on {
			bad(key, "is set but %s is empty: the embedded server takes no credentials or TLS; set %s to the server they are for", addrKey, addrKey)
		}
	}
	if len(c.Kafka.Brokers) == 0 {
		embedded("kafka.sasl.mechanism", c.Kafka.SASL.Mechanism != "", "kafka.brokers")
		embedded("kafka.tls.enabled", c.Kafka.TLS.Enabled, "kafka.brokers")
	}
	if c.Redis.Addr == "" {
		embedded("redis.password", c.Redis.Password != "", "redis.addr")
		embedded("redis.tls.enabled", c.Redis.TLS.Enabled, "redis.addr")
	}
	if c.ClickHouse.Addr == "" {
		embedded("clickhouse.tls.enabled", c.ClickHouse.TLS.Enabled, "clickhouse.addr")
	}
}

// checkTLS builds the TLS configuration once, so a missing or bad file stops the start naming
// the setting instead of failing on the first connection.
func checkTLS(bad Bad, key string, f tlsconf.Files) {
	if _, err := f.Config(); err != nil {
		bad(key, "%v", err)
	}
}
