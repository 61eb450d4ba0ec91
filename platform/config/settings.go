package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"tally/platform/chclient"
	"tally/platform/kafka"
	"tally/platform/redisclient"
	"tally/platform/tlsconf"
)

// Config is every setting of every tally binary; each binary reads the sections it uses.
type Config struct {
	DataDir    string     `mapstructure:"data_dir"`
	Log        Log        `mapstructure:"log"`
	Debug      Debug      `mapstructure:"debug"`
	Runtime    Runtime    `mapstructure:"runtime"`
	Kafka      Kafka      `mapstructure:"kafka"`
	ClickHouse ClickHouse `mapstructure:"clickhouse"`
	Redis      Redis      `mapstructure:"redis"`
	Collector  Collector  `mapstructure:"collector"`
	Aggregator Aggregator `mapstructure:"aggregator"`
	Demo       Demo       `mapstructure:"demo"`
	Shutdown   Shutdown   `mapstructure:"shutdown"`
}

type Log struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
}

type Debug struct {
	Pprof bool `mapstructure:"pprof"`
}

type Runtime struct {
	ProcsPerCPU int `mapstructure:"procs_per_cpu"`
}

type Kafka struct {
	Brokers        []string      `mapstructure:"brokers"`
	EmbeddedAddr   string        `mapstructure:"embedded_addr"`
	SyncWrites     bool          `mapstructure:"sync_writes"`
	Partitions     int           `mapstructure:"partitions"`
	Replication    int           `mapstructure:"replication_factor"`
	MinInsync      int           `mapstructure:"min_insync_replicas"`
	ViewsRetention time.Duration `mapstructure:"views_retention"`
	ProduceTimeout time.Duration `mapstructure:"produce_timeout"`
	MaxBuffered    int           `mapstructure:"max_buffered_records"`
	SASL           KafkaSASL     `mapstructure:"sasl"`
	TLS            tlsconf.Files `mapstructure:"tls"`
}

type KafkaSASL struct {
	Mechanism string `mapstructure:"mechanism"`
	Username  string `mapstructure:"username"`
	Password  string `mapstructure:"password"`
}

type ClickHouse struct {
	Addr         string `mapstructure:"addr"`
	EmbeddedAddr string `mapstructure:"embedded_addr"`
	Database     string `mapstructure:"database"`
	Username     string `mapstructure:"username"`
	Password     string `mapstructure:"password"`
	Cluster      string `mapstructure:"cluster"`

	// The embedded engine's dashboards user and its limits.
	ReadonlyUser     string        `mapstructure:"embedded_readonly_user"`
	ReadonlyPassword string        `mapstructure:"embedded_readonly_password"`
	MaxExecutionTime time.Duration `mapstructure:"embedded_max_execution_time"`
	MaxResultRows    int           `mapstructure:"embedded_max_result_rows"`
	MaxResultBytes   int           `mapstructure:"embedded_max_result_bytes"`
	CORSOrigins      []string      `mapstructure:"embedded_cors_origins"`
	TLS              tlsconf.Files `mapstructure:"tls"`
}

// Options is what chclient.Open needs of these settings.
func (c ClickHouse) Options() chclient.Options {
	return chclient.Options{Addr: c.Addr, Database: c.Database, Username: c.Username, Password: c.Password, TLS: c.TLS, Cluster: c.Cluster}
}

type Redis struct {
	Addr              string        `mapstructure:"addr"`
	EmbeddedPort      int           `mapstructure:"embedded_port"`
	EmbeddedMaxMemory string        `mapstructure:"embedded_maxmemory"`
	Username          string        `mapstructure:"username"`
	Password          string        `mapstructure:"password"`
	TLS               tlsconf.Files `mapstructure:"tls"`
}

// Options is what redisclient.New needs of these settings.
func (r Redis) Options() redisclient.Options {
	return redisclient.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, TLS: r.TLS}
}

// Durability is how many replicas the topics tally creates get (kafka.CreateTopics).
func (k Kafka) Durability() kafka.Durability {
	return kafka.Durability{ReplicationFactor: k.Replication, MinInsyncReplicas: k.MinInsync}
}

// Security is how Kafka clients authenticate and protect their link (kafka.Security.Options).
func (k Kafka) Security() kafka.Security {
	return kafka.Security{SASLMechanism: k.SASL.Mechanism, Username: k.SASL.Username, Password: k.SASL.Password, TLS: k.TLS}
}

type Collector struct {
	Addr         string        `mapstructure:"addr"`
	MaxBodyBytes int           `mapstructure:"max_body_bytes"`
	MaxLines     int           `mapstructure:"max_lines"`
	FutureBound  time.Duration `mapstructure:"future_bound"`
	LateBound    time.Duration `mapstructure:"late_bound"`

	ReadHeaderTimeout   time.Duration `mapstructure:"read_header_timeout"`
	ReadTimeout         time.Duration `mapstructure:"read_timeout"`
	WriteTimeout        time.Duration `mapstructure:"write_timeout"`
	IdleTimeout         time.Duration `mapstructure:"idle_timeout"`
	MaxConcurrentBodies int           `mapstructure:"max_concurrent_bodies"`
	AdminAddr           string        `mapstructure:"admin_addr"`
	Auth                CollectorAuth `mapstructure:"auth"`
}

type Aggregator struct {
	Addr           string        `mapstructure:"addr"`
	Group          string        `mapstructure:"group"`
	InstanceID     string        `mapstructure:"instance_id"`
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	FlushInterval  time.Duration `mapstructure:"flush_interval"`
	SketchInterval time.Duration `mapstructure:"sketch_interval"`
	MaxBatch       int           `mapstructure:"max_batch"`
	DedupeWindow   time.Duration `mapstructure:"dedupe_window"`
	DedupeGrace    time.Duration `mapstructure:"dedupe_grace"`
	TTLSeconds     time.Duration `mapstructure:"ttl_seconds"`
	TTLMinutes     time.Duration `mapstructure:"ttl_minutes"`
	TTLDays        time.Duration `mapstructure:"ttl_days"`
}

type Demo struct {
	Enabled bool `mapstructure:"enabled"`
	Rate    int  `mapstructure:"rate"`
	Items   int  `mapstructure:"items"`
}

type Shutdown struct {
	Timeout time.Duration `mapstructure:"timeout"`
}

type setting struct {
	key  string
	def  any
	help string
}

const day = 24 * time.Hour

// settings declares every key once: its default and its one-line help.
func settings() []setting {
	return []setting{
		{"data_dir", "./data", "directory for embedded Kafka, ClickHouse and Redis data"},
		{"log.level", "info", "log level: debug, info, warn, error"},
		{"log.format", "text", "log format: text or json"},
		{"debug.pprof", false, "serve Go's /debug/pprof/ profiles next to /metrics (collector and aggregator addresses)"},
		{"runtime.procs_per_cpu", 4, "Go scheduler slots (GOMAXPROCS) per CPU the process may use; above 1 one stays free to notice ready connections at once (ignored when the GOMAXPROCS environment variable is set)"},

		{"kafka.brokers", []string{}, "Kafka seed brokers (host:port,...); empty runs the embedded broker (all-in-one only)"},
		{"kafka.embedded_addr", "127.0.0.1:9092", "listen address of the embedded Kafka broker"},
		{"kafka.sync_writes", false, "embedded broker fsyncs every batch (survives power loss, slower)"},
		{"kafka.partitions", 8, "partitions per topic when tally creates its topics (an existing topic keeps its count; likes must never change it: deploy/README.md)"},
		{"kafka.replication_factor", 0, "replicas of each partition when tally creates its topics; 0: min(3, brokers in the cluster), so 1 on the embedded broker and 3 on a cluster"},
		{"kafka.min_insync_replicas", 0, "min.insync.replicas of the topics tally creates (with acks=all, a write needs this many replicas); 0: replication_factor - 1, at least 1"},
		{"kafka.views_retention", 7 * day, "how long the views topic keeps records (the sink's files keep them after); the likes topic is always kept forever"},
		{"kafka.produce_timeout", 10 * time.Second, "how long an ingest request waits for Kafka before answering 503"},
		{"kafka.max_buffered_records", 200000, "producer buffer bound; beyond it ingest answers 503 instead of queueing"},
		{"kafka.sasl.mechanism", "", "SASL mechanism for kafka.brokers: empty (none), SCRAM-SHA-256 or SCRAM-SHA-512"},
		{"kafka.sasl.username", "", "SASL user"},
		{"kafka.sasl.password", "", "SASL password"},
		{"kafka.tls.enabled", false, "connect to Kafka over TLS (certificates are always verified)"},
		{"kafka.tls.ca_file", "", "PEM CA bundle Kafka's certificate must chain to; empty: the system's roots"},
		{"kafka.tls.cert_file", "", "PEM client certificate for Kafka (with kafka.tls.key_file), if it requires one"},
		{"kafka.tls.key_file", "", "PEM key of kafka.tls.cert_file"},
		{"kafka.tls.server_name", "", "name Kafka's certificate must carry; empty: the host dialled"},

		{"clickhouse.addr", "", "ClickHouse HTTP endpoint host:port; empty runs the embedded engine (all-in-one only)"},
		{"clickhouse.cluster", "", "ClickHouse cluster name (remote_servers): migrations run ON CLUSTER with Replicated engines and add <table>_dist Distributed tables for reads; empty: one server (deploy/README.md)"},
		{"clickhouse.embedded_addr", "127.0.0.1:8123", "listen address of the embedded ClickHouse HTTP interface"},
		{"clickhouse.database", "tally", "ClickHouse database holding tally's tables"},
		{"clickhouse.username", "default", "ClickHouse user (the embedded engine's pipeline user: full access inside the engine)"},
		{"clickhouse.password", "", "ClickHouse password; required when the embedded engine listens on a non-loopback address"},
		{"clickhouse.embedded_readonly_user", "dashboards", "embedded engine: the read-only user for dashboards and curl (readonly, no table functions, limits below)"},
		{"clickhouse.embedded_readonly_password", "", "embedded engine: the read-only user's password; required on a non-loopback address"},
		{"clickhouse.embedded_max_execution_time", 3 * time.Second, "embedded engine: the read-only user's max_execution_time, which clients can only lower; pipeline queries wait at most this long behind one"},
		{"clickhouse.embedded_max_result_rows", 1000000, "embedded engine: the read-only user's max_result_rows (clients can only lower it)"},
		{"clickhouse.embedded_max_result_bytes", 32 << 20, "embedded engine: the read-only user's max_result_bytes (clients can only lower it)"},
		{"clickhouse.embedded_cors_origins", []string{}, "embedded engine: browser origins allowed to read answers (CORS); never a wildcard"},
		{"clickhouse.tls.enabled", false, "connect to ClickHouse over TLS (certificates are always verified)"},
		{"clickhouse.tls.ca_file", "", "PEM CA bundle ClickHouse's certificate must chain to; empty: the system's roots"},
		{"clickhouse.tls.cert_file", "", "PEM client certificate for ClickHouse (with clickhouse.tls.key_file), if it requires one"},
		{"clickhouse.tls.key_file", "", "PEM key of clickhouse.tls.cert_file"},
		{"clickhouse.tls.server_name", "", "name ClickHouse's certificate must carry; empty: the host dialled"},

		{"redis.addr", "", "Redis host:port; empty starts a local redis-server under data_dir (all-in-one only)"},
		{"redis.embedded_port", 0, "port of the embedded redis-server; 0 picks a free one"},
		{"redis.embedded_maxmemory", "1gb", "memory bound of the embedded redis-server (e.g. 512mb, 2gb); it never evicts, so writes fail at the bound"},
		{"redis.username", "", "Redis ACL user; empty with a password: the default user (requirepass)"},
		{"redis.password", "", "Redis password"},
		{"redis.tls.enabled", false, "connect to Redis over TLS (certificates are always verified)"},
		{"redis.tls.ca_file", "", "PEM CA bundle Redis's certificate must chain to; empty: the system's roots"},
		{"redis.tls.cert_file", "", "PEM client certificate for Redis (with redis.tls.key_file), if it requires one"},
		{"redis.tls.key_file", "", "PEM key of redis.tls.cert_file"},
		{"redis.tls.server_name", "", "name Redis's certificate must carry; empty: the host dialled"},

		{"collector.addr", "127.0.0.1:8080", "collector HTTP listen address (API, /healthz, /readyz, /metrics)"},
		{"collector.max_body_bytes", 4 << 20, "largest accepted request body in bytes (413 beyond)"},
		{"collector.max_lines", 10000, "most events in one POST /v1/events body"},
		{"collector.future_bound", 5 * time.Minute, "events stamped further in the future are rejected"},
		{"collector.late_bound", 24 * time.Hour, "events older than this are rejected"},
		{"collector.read_header_timeout", 5 * time.Second, "bound on reading a request's header; the connection is closed beyond it"},
		{"collector.read_timeout", 30 * time.Second, "bound on reading a whole request, header and body (a body still arriving is cut off with 408)"},
		{"collector.write_timeout", 60 * time.Second, "bound from a request's header to the end of its answer; must exceed collector.read_timeout plus kafka.produce_timeout"},
		{"collector.idle_timeout", 60 * time.Second, "an idle keep-alive connection is closed after this long"},
		{"collector.max_concurrent_bodies", 64, "ingest requests read and handled at once; beyond it ingest answers 503 at once (body memory stays under this times collector.max_body_bytes)"},
		{"collector.admin_addr", "127.0.0.1:9080", "collector admin listen address (/metrics, /debug/pprof/, /healthz, /readyz) when auth is on; with auth off these stay on collector.addr, which is then loopback"},
		{"collector.auth.enabled", "auto", "API access control: on, off (only allowed when collector.addr is loopback) or auto (on unless collector.addr is loopback); docs/SECURITY.md"},
		{"collector.auth.keys", []string{}, "producer API keys: in YAML a list of {id, sha256, scopes, rate, burst}; in a flag or the environment id:sha256:scope+scope:rate:burst, comma-separated (mint one with: collector keys new)"},
		{"collector.auth.user_token_key", "", "HMAC-SHA256 key (at least 32 bytes) verifying the user tokens (HS256 JWT) that likes require when auth is on"},

		{"aggregator.addr", "127.0.0.1:8081", "aggregator admin listen address (/healthz, /readyz, /metrics)"},
		{"aggregator.group", "tally-aggregator", "Kafka consumer group of the aggregators"},
		{"aggregator.instance_id", "", "static group membership id (e.g. the pod name): a restarted aggregator takes back its partitions at once"},
		{"aggregator.session_timeout", 10 * time.Second, "how long the group waits for a silent aggregator before moving its partitions"},
		{"aggregator.flush_interval", 500 * time.Millisecond, "how often aggregated batches are written to ClickHouse"},
		{"aggregator.sketch_interval", 5 * time.Second, "how often unique-viewer sketches are written to ClickHouse (a crash replays the views since into them)"},
		{"aggregator.max_batch", 200000, "records per partition batch before an early flush"},
		{"aggregator.dedupe_window", 30 * time.Minute, "a view counts once per viewer and item within this much event time"},
		{"aggregator.dedupe_grace", 10 * time.Minute, "how far behind the partition's newest event a late view is still deduplicated"},
		{"aggregator.ttl_seconds", 7 * day, "retention of per-second totals"},
		{"aggregator.ttl_minutes", 90 * day, "retention of per-minute totals"},
		{"aggregator.ttl_days", 730 * day, "retention of per-hour and per-day totals"},

		{"demo.enabled", true, "all-in-one: run the built-in demo workload"},
		{"demo.rate", 200, "demo workload: view events per second"},
		{"demo.items", 50, "demo workload: number of items"},

		{"shutdown.timeout", 20 * time.Second, "bound on graceful shutdown"},
	}
}

// Validate checks every setting and names the first bad key.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "got %q; want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "got %q; want text or json", c.Log.Format)
	}
	if c.Runtime.ProcsPerCPU < 1 || c.Runtime.ProcsPerCPU > 64 {
		bad("runtime.procs_per_cpu", "got %d; want 1..64", c.Runtime.ProcsPerCPU)
	}
	for _, b := range c.Kafka.Brokers {
		checkHostPort(bad, "kafka.brokers", b)
	}
	checkHostPort(bad, "kafka.embedded_addr", c.Kafka.EmbeddedAddr)
	if c.Kafka.Partitions < 1 || c.Kafka.Partitions > 1024 {
		bad("kafka.partitions", "got %d; want 1..1024", c.Kafka.Partitions)
	}
	if c.Kafka.Replication < 0 || c.Kafka.Replication > 16 {
		bad("kafka.replication_factor", "got %d; want 0 (automatic) or 1..16", c.Kafka.Replication)
	}
	if c.Kafka.MinInsync < 0 || c.Kafka.Replication > 0 && c.Kafka.MinInsync > c.Kafka.Replication {
		bad("kafka.min_insync_replicas", "got %d; want 0 (automatic) or 1..kafka.replication_factor (%d)", c.Kafka.MinInsync, c.Kafka.Replication)
	}
	if c.Kafka.ViewsRetention < time.Hour {
		bad("kafka.views_retention", "got %s; want at least 1h (a replay after an outage reads from it)", c.Kafka.ViewsRetention)
	}
	if c.Kafka.ProduceTimeout < time.Second {
		bad("kafka.produce_timeout", "got %s; want at least 1s (the Kafka client's smallest delivery timeout)", c.Kafka.ProduceTimeout)
	}
	if c.Kafka.MaxBuffered < 1 {
		bad("kafka.max_buffered_records", "got %d; want at least 1", c.Kafka.MaxBuffered)
	}
	if c.ClickHouse.Addr != "" {
		checkHostPort(bad, "clickhouse.addr", c.ClickHouse.Addr)
	}
	checkHostPort(bad, "clickhouse.embedded_addr", c.ClickHouse.EmbeddedAddr)
	if c.ClickHouse.Cluster != "" && !identifier(c.ClickHouse.Cluster) {
		bad("clickhouse.cluster", "got %q; want letters, digits and underscores (a name in remote_servers)", c.ClickHouse.Cluster)
	}
	if c.ClickHouse.Cluster != "" && c.ClickHouse.Addr == "" {
		bad("clickhouse.cluster", "got %q with no clickhouse.addr; the embedded engine is one server", c.ClickHouse.Cluster)
	}
	if !identifier(c.ClickHouse.Database) {
		bad("clickhouse.database", "got %q; want letters, digits and underscores", c.ClickHouse.Database)
	}
	c.validateEmbeddedClickHouse(bad)
	if c.Redis.Addr != "" {
		checkHostPort(bad, "redis.addr", c.Redis.Addr)
	}
	if c.Redis.EmbeddedPort < 0 || c.Redis.EmbeddedPort > 65535 {
		bad("redis.embedded_port", "got %d; want 0..65535", c.Redis.EmbeddedPort)
	}
	if !memorySize(c.Redis.EmbeddedMaxMemory) {
		bad("redis.embedded_maxmemory", "got %q; want a size such as 512mb or 2gb", c.Redis.EmbeddedMaxMemory)
	}
	c.validateBackendSecurity(bad)
	checkHostPort(bad, "collector.addr", c.Collector.Addr)
	if c.Collector.MaxBodyBytes < 1024 {
		bad("collector.max_body_bytes", "got %d; want at least 1024", c.Collector.MaxBodyBytes)
	}
	if c.Collector.MaxLines < 1 {
		bad("collector.max_lines", "got %d; want at least 1", c.Collector.MaxLines)
	}
	positive(bad, "collector.future_bound", c.Collector.FutureBound)
	positive(bad, "collector.late_bound", c.Collector.LateBound)
	positive(bad, "collector.read_header_timeout", c.Collector.ReadHeaderTimeout)
	positive(bad, "collector.read_timeout", c.Collector.ReadTimeout)
	positive(bad, "collector.idle_timeout", c.Collector.IdleTimeout)
	if c.Collector.ReadHeaderTimeout > c.Collector.ReadTimeout {
		bad("collector.read_header_timeout", "got %s; want at most collector.read_timeout (%s), which includes the header", c.Collector.ReadHeaderTimeout, c.Collector.ReadTimeout)
	}
	// The write bound runs from the end of the header to the end of the answer: a body read
	// within the read bound must still leave the wait for Kafka its full time.
	if need := c.Collector.ReadTimeout + c.Kafka.ProduceTimeout; c.Collector.WriteTimeout <= need {
		bad("collector.write_timeout", "got %s; want more than collector.read_timeout + kafka.produce_timeout (%s), or a request read in time could not be answered", c.Collector.WriteTimeout, need)
	}
	if c.Collector.MaxConcurrentBodies < 1 {
		bad("collector.max_concurrent_bodies", "got %d; want at least 1", c.Collector.MaxConcurrentBodies)
	}
	c.Collector.validateAuth(bad)
	checkHostPort(bad, "aggregator.addr", c.Aggregator.Addr)
	if c.Aggregator.Group == "" {
		bad("aggregator.group", "must not be empty")
	}
	positive(bad, "aggregator.flush_interval", c.Aggregator.FlushInterval)
	if c.Aggregator.SketchInterval < c.Aggregator.FlushInterval {
		bad("aggregator.sketch_interval", "got %s; want at least aggregator.flush_interval (%s)", c.Aggregator.SketchInterval, c.Aggregator.FlushInterval)
	}
	if c.Aggregator.SessionTimeout < time.Second {
		bad("aggregator.session_timeout", "got %s; want at least 1s", c.Aggregator.SessionTimeout)
	}
	if c.Aggregator.MaxBatch < 1 || c.Aggregator.MaxBatch > 500000 {
		bad("aggregator.max_batch", "got %d; want 1..500000 (one batch must stay one ClickHouse insert block)", c.Aggregator.MaxBatch)
	}
	positive(bad, "aggregator.dedupe_window", c.Aggregator.DedupeWindow)
	if c.Aggregator.DedupeGrace < 0 {
		bad("aggregator.dedupe_grace", "got %s; want zero or more", c.Aggregator.DedupeGrace)
	}
	for _, t := range []struct {
		key string
		d   time.Duration
	}{{"aggregator.ttl_seconds", c.Aggregator.TTLSeconds}, {"aggregator.ttl_minutes", c.Aggregator.TTLMinutes}, {"aggregator.ttl_days", c.Aggregator.TTLDays}} {
		if t.d < day || t.d%day != 0 {
			bad(t.key, "got %s; want a whole number of days (e.g. 168h)", t.d)
		}
	}
	if c.Demo.Rate < 1 {
		bad("demo.rate", "got %d; want at least 1", c.Demo.Rate)
	}
	if c.Demo.Items < 1 {
		bad("demo.items", "got %d; want at least 1", c.Demo.Items)
	}
	positive(bad, "shutdown.timeout", c.Shutdown.Timeout)
	return errors.Join(errs...)
}

// validateEmbeddedClickHouse checks the embedded engine's users and limits. An engine anyone on
// the network can reach must have passwords: without them its users could read every table and
// the pipeline user could change them.
func (c Config) validateEmbeddedClickHouse(bad func(string, string, ...any)) {
	ch := c.ClickHouse
	if !identifier(ch.ReadonlyUser) {
		bad("clickhouse.embedded_readonly_user", "got %q; want letters, digits and underscores", ch.ReadonlyUser)
	} else if ch.ReadonlyUser == ch.Username {
		bad("clickhouse.embedded_readonly_user", "got %q, the same as clickhouse.username; want a different user", ch.ReadonlyUser)
	}
	if ch.MaxExecutionTime < 100*time.Millisecond {
		bad("clickhouse.embedded_max_execution_time", "got %s; want at least 100ms", ch.MaxExecutionTime)
	}
	if ch.MaxResultRows < 1 {
		bad("clickhouse.embedded_max_result_rows", "got %d; want at least 1", ch.MaxResultRows)
	}
	if ch.MaxResultBytes < 1024 {
		bad("clickhouse.embedded_max_result_bytes", "got %d; want at least 1024", ch.MaxResultBytes)
	}
	for _, o := range ch.CORSOrigins {
		if o == "*" || !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			bad("clickhouse.embedded_cors_origins", "got %q; want origins such as https://grafana.example.com, never *", o)
		}
	}
	if ch.Addr == "" && !Loopback(ch.EmbeddedAddr) {
		if ch.Password == "" {
			bad("clickhouse.password", "must be set when clickhouse.embedded_addr (%s) is not a loopback address: anyone reaching it would have the pipeline user's rights", ch.EmbeddedAddr)
		}
		if ch.ReadonlyPassword == "" {
			bad("clickhouse.embedded_readonly_password", "must be set when clickhouse.embedded_addr (%s) is not a loopback address", ch.EmbeddedAddr)
		}
	}
}

func positive(bad func(string, string, ...any), key string, d time.Duration) {
	if d <= 0 {
		bad(key, "got %s; want a positive duration such as 500ms or 10s", d)
	}
}

func checkHostPort(bad func(string, string, ...any), key, v string) {
	if _, _, err := net.SplitHostPort(v); err != nil {
		bad(key, "got %q; want host:port", v)
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

func identifier(s string) bool {
	if s == "" {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0
}
