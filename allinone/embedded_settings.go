package allinone

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/devstack/chembed"
	"github.com/tallypipeline/tally/devstack/embedded"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/webguard"
)

// Embedded is the embedded stack's section (embedded.*): where its servers listen and what
// bounds them. They mean nothing to a component binary, which connects to the servers it is
// given, so only the all-in-one (`pipeline run` and `pipeline infra`) reads them.
type Embedded struct {
	KafkaAddr       string `mapstructure:"kafka_addr"`
	KafkaBrokers    int    `mapstructure:"kafka_brokers"`
	KafkaSyncWrites bool   `mapstructure:"kafka_sync_writes"`

	ClickHouseAddr   string        `mapstructure:"clickhouse_addr"`
	DashboardsUser   string        `mapstructure:"dashboards_user"`
	DashboardsPass   string        `mapstructure:"dashboards_password"`
	MaxExecutionTime time.Duration `mapstructure:"dashboards_max_execution_time"`
	MaxResultRows    int           `mapstructure:"dashboards_max_result_rows"`
	MaxResultBytes   int           `mapstructure:"dashboards_max_result_bytes"`
	MaxMemoryUsage   int           `mapstructure:"dashboards_max_memory_usage"`
	MaxRowsToRead    int           `mapstructure:"dashboards_max_rows_to_read"`
	CORSOrigins      []string      `mapstructure:"cors_origins"`

	RedisPort      int    `mapstructure:"redis_port"`
	RedisMaxMemory string `mapstructure:"redis_maxmemory"`
	RedisNice      int    `mapstructure:"redis_nice"`
}

// Options are what devstack/embedded needs of the section.
func (s *Embedded) Options(reg prometheus.Registerer) embedded.Options {
	return embedded.Options{
		KafkaAddr: s.KafkaAddr, KafkaBrokers: s.KafkaBrokers, KafkaSyncWrites: s.KafkaSyncWrites,
		ClickHouseAddr: s.ClickHouseAddr,
		Dashboards:     chembed.User{Name: s.DashboardsUser, Password: s.DashboardsPass},
		Limits: chembed.Limits{MaxExecutionTime: s.MaxExecutionTime, MaxResultRows: uint64(s.MaxResultRows),
			MaxResultBytes: uint64(s.MaxResultBytes), MaxMemoryUsage: uint64(s.MaxMemoryUsage), MaxRowsToRead: uint64(s.MaxRowsToRead)},
		CORSOrigins: s.CORSOrigins,
		RedisPort:   s.RedisPort, RedisMaxMemory: s.RedisMaxMemory, RedisNice: s.RedisNice,
		Registry: reg,
	}
}

// Name is the section's top-level key.
func (*Embedded) Name() string { return "embedded" }

// Settings declares the embedded stack's keys once: default and one-line help.
func (*Embedded) Settings() []config.Setting {
	return []config.Setting{
		{Key: "embedded.kafka_addr", Default: "127.0.0.1:9092", Help: "listen address of the embedded Kafka broker (when kafka.brokers is empty); further brokers listen on the next ports"},
		{Key: "embedded.kafka_brokers", Default: 1, Help: "brokers of the embedded Kafka cluster (1-5, one process): 3 or more give the topics 3 replicas and min.insync.replicas 2, as on a real cluster"},
		{Key: "embedded.kafka_sync_writes", Default: true, Help: "embedded broker acknowledges a write only once it is fsynced (the fsyncs of the writes waiting at one time shared), so a 202 survives a power cut; false keeps batches in the page cache (a process crash is survived, a power cut is not; docs/PERFORMANCE.md, Kafka settings)"},
		{Key: "embedded.clickhouse_addr", Default: "127.0.0.1:8123", Help: "listen address of the embedded ClickHouse HTTP interface (when clickhouse.addr is empty)"},
		{Key: "embedded.dashboards_user", Default: "dashboards", Help: "embedded ClickHouse: the read-only user for dashboards and curl (readonly, limits below, nothing outside the engine)"},
		{Key: "embedded.dashboards_password", Default: "", Help: "embedded ClickHouse: the read-only user's password; required on a non-loopback address"},
		{Key: "embedded.dashboards_max_execution_time", Default: 3 * time.Second, Help: "embedded ClickHouse: the read-only user's max_execution_time, which clients can only lower; pipeline queries wait at most this long behind one"},
		{Key: "embedded.dashboards_max_result_rows", Default: 1000000, Help: "embedded ClickHouse: the read-only user's max_result_rows (clients can only lower it)"},
		{Key: "embedded.dashboards_max_result_bytes", Default: 32 << 20, Help: "embedded ClickHouse: the read-only user's max_result_bytes (clients can only lower it)"},
		{Key: "embedded.dashboards_max_memory_usage", Default: 512 << 20, Help: "embedded ClickHouse: the read-only user's max_memory_usage in bytes (clients can only lower it)"},
		{Key: "embedded.dashboards_max_rows_to_read", Default: 2000000000, Help: "embedded ClickHouse: the read-only user's max_rows_to_read (clients can only lower it)"},
		{Key: "embedded.cors_origins", Default: []string{}, Help: "embedded ClickHouse: browser origins allowed to read answers and post (CORS); never a wildcard"},
		{Key: "embedded.redis_port", Default: 0, Help: "port of the embedded redis-server (when redis.addr is empty); 0 picks a free one"},
		{Key: "embedded.redis_maxmemory", Default: "1gb", Help: "memory bound of the embedded redis-server (e.g. 512mb, 2gb); it never evicts, so writes fail at the bound"},
		{Key: "embedded.redis_nice", Default: -10, Help: "niceness of the embedded redis-server (-20..19; 0 keeps the all-in-one's): below 0 it runs before the pipeline's threads, as on a machine of its own, given root or CAP_SYS_NICE (else a warning, as with 0)"},
	}
}

// Validate checks the section. An engine anyone on the network can reach must have a password
// for the dashboards user too (the administrator always has one).
func (s *Embedded) Validate(shared *config.Config, bad config.Bad) {
	config.CheckHostPort(bad, "embedded.kafka_addr", s.KafkaAddr)
	if s.KafkaBrokers < 1 || s.KafkaBrokers > 5 {
		bad("embedded.kafka_brokers", "got %d; want 1 to 5", s.KafkaBrokers)
	}
	config.CheckHostPort(bad, "embedded.clickhouse_addr", s.ClickHouseAddr)
	if !config.Identifier(s.DashboardsUser) {
		bad("embedded.dashboards_user", "got %q; want letters, digits and underscores", s.DashboardsUser)
	} else if s.DashboardsUser == shared.ClickHouse.Username {
		bad("embedded.dashboards_user", "got %q, the same as clickhouse.username; want a different user", s.DashboardsUser)
	}
	if shared.ClickHouse.Addr == "" && !webguard.LoopbackAddr(s.ClickHouseAddr) && s.DashboardsPass == "" {
		bad("embedded.dashboards_password", "must be set when embedded.clickhouse_addr (%s) is not a loopback address", s.ClickHouseAddr)
	}
	if s.MaxExecutionTime < 100*time.Millisecond {
		bad("embedded.dashboards_max_execution_time", "got %s; want at least 100ms", s.MaxExecutionTime)
	}
	for _, b := range []struct {
		key        string
		got, least int
	}{
		{"embedded.dashboards_max_result_rows", s.MaxResultRows, 1},
		{"embedded.dashboards_max_result_bytes", s.MaxResultBytes, 1024},
		{"embedded.dashboards_max_memory_usage", s.MaxMemoryUsage, 1 << 20},
		{"embedded.dashboards_max_rows_to_read", s.MaxRowsToRead, 1},
	} {
		if b.got < b.least {
			bad(b.key, "got %d; want at least %d", b.got, b.least)
		}
	}
	for _, o := range s.CORSOrigins {
		if o == "*" || !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			bad("embedded.cors_origins", "got %q; want origins such as https://grafana.example.com, never *", o)
		}
	}
	if s.RedisPort < 0 || s.RedisPort > 65535 {
		bad("embedded.redis_port", "got %d; want 0..65535", s.RedisPort)
	}
	if s.RedisNice < -20 || s.RedisNice > 19 {
		bad("embedded.redis_nice", "got %d; want -20..19", s.RedisNice)
	}
	if !memorySize(s.RedisMaxMemory) {
		bad("embedded.redis_maxmemory", "got %q; want a size such as 512mb or 2gb", s.RedisMaxMemory)
	}
}

// memorySize reports whether s is a positive memory size as redis-server reads it: digits and
// an optional unit k, kb, m, mb, g or gb (any case). Zero is refused: to Redis it means no bound.
func memorySize(s string) bool {
	s = strings.ToLower(s)
	num := strings.TrimRight(s, "kmgb")
	switch s[len(num):] {
	case "", "b", "k", "kb", "m", "mb", "g", "gb":
	default:
		return false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return err == nil && n > 0
}
