package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/platform/tlsconf"
	"github.com/tallypipeline/tally/schemas"
)

// Config is the shared sections, read by every tally binary; a component's own section is
// declared in its package (see Section) and loaded beside this one.
type Config struct {
	DataDir    string     `mapstructure:"data_dir"`
	Log        Log        `mapstructure:"log"`
	Debug      Debug      `mapstructure:"debug"`
	Runtime    Runtime    `mapstructure:"runtime"`
	Kafka      Kafka      `mapstructure:"kafka"`
	ClickHouse ClickHouse `mapstructure:"clickhouse"`
	Redis      Redis      `mapstructure:"redis"`
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
	ProcsPerCPU int    `mapstructure:"procs_per_cpu"`
	GCPercent   int    `mapstructure:"gc_percent"`
	MemoryLimit string `mapstructure:"memory_limit"`
}

// GoMemoryLimit is the Go soft memory limit (GOMEMLIMIT) runtime.memory_limit asks for, in
// bytes, 0 for none: "off" none; "auto" share of container (the container's memory limit, 0 when
// it has none); else the size it states ("1.5GiB", "800MB").
func (r Runtime) GoMemoryLimit(share float64, container int64) (int64, error) {
	switch r.MemoryLimit {
	case "off":
		return 0, nil
	case "auto":
		return int64(float64(container) * share), nil
	}
	n, err := humanize.ParseBytes(r.MemoryLimit)
	if err != nil || n == 0 || n > math.MaxInt64 {
		return 0, fmt.Errorf("got %q; want auto, off or a size such as 1.5GiB or 800MB", r.MemoryLimit)
	}
	return int64(n), nil
}

type Kafka struct {
	Brokers        []string      `mapstructure:"brokers"`
	Partitions     int           `mapstructure:"partitions"`
	Replication    int           `mapstructure:"replication_factor"`
	MinInsync      int           `mapstructure:"min_insync_replicas"`
	ViewsRetention time.Duration `mapstructure:"views_retention"`
	ProduceTimeout time.Duration `mapstructure:"produce_timeout"`
	MaxBuffered    int           `mapstructure:"max_buffered_records"`
	Compression    string        `mapstructure:"compression"`
	RecordFormat   string        `mapstructure:"record_format"`
	SchemaID       int64         `mapstructure:"schema_id"`
	SASL           KafkaSASL     `mapstructure:"sasl"`
	TLS            tlsconf.Files `mapstructure:"tls"`
}

type KafkaSASL struct {
	Mechanism string `mapstructure:"mechanism"`
	Username  string `mapstructure:"username"`
	Password  string `mapstructure:"password"`
	TokenFile string `mapstructure:"token_file"`
}

type ClickHouse struct {
	Addr     string `mapstructure:"addr"`
	Database string `mapstructure:"database"`
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	Cluster  string `mapstructure:"cluster"`
	Quorum   bool   `mapstructure:"quorum"`

	TLS tlsconf.Files `mapstructure:"tls"`
}

// Options is what chclient.Open needs of these settings.
func (c ClickHouse) Options() chclient.Options {
	return chclient.Options{Addr: c.Addr, Database: c.Database, Username: c.Username, Password: c.Password, TLS: c.TLS, Cluster: c.Cluster, Quorum: c.Quorum}
}

type Redis struct {
	Addr             string        `mapstructure:"addr"`
	Cluster          bool          `mapstructure:"cluster"`
	SentinelMaster   string        `mapstructure:"sentinel_master"`
	SentinelPassword string        `mapstructure:"sentinel_password"`
	Username         string        `mapstructure:"username"`
	Password         string        `mapstructure:"password"`
	TLS              tlsconf.Files `mapstructure:"tls"`
}

// Options is what redisclient.New needs of these settings.
func (r Redis) Options() redisclient.Options {
	return redisclient.Options{Addr: r.Addr, Cluster: r.Cluster, SentinelMaster: r.SentinelMaster, SentinelPassword: r.SentinelPassword,
		Username: r.Username, Password: r.Password, TLS: r.TLS}
}

// Durability is how many replicas the topics tally creates get (kafka.CreateTopics).
func (k Kafka) Durability() kafka.Durability {
	return kafka.Durability{ReplicationFactor: k.Replication, MinInsyncReplicas: k.MinInsync}
}

// Producer is how the components' producers produce: bounds and codec (validated at load).
func (k Kafka) Producer(maxBuffered int) kafka.Producer {
	codec, _ := kafka.ParseCompression(k.Compression)
	return kafka.Producer{MaxBuffered: maxBuffered, DeliveryTimeout: k.ProduceTimeout, Codec: codec}
}

// Encoding is the format the components write records in (validated at load).
func (k Kafka) Encoding() schemas.Encoding {
	e, _ := schemas.ParseEncoding(k.RecordFormat, k.SchemaID)
	return e
}

// Security is how Kafka clients authenticate and protect their link (kafka.Security.Options).
func (k Kafka) Security() kafka.Security {
	return kafka.Security{SASLMechanism: k.SASL.Mechanism, Username: k.SASL.Username, Password: k.SASL.Password, TokenFile: k.SASL.TokenFile, TLS: k.TLS}
}

type Shutdown struct {
	Timeout time.Duration `mapstructure:"timeout"`
}

// settings declares every shared key once: its default and its one-line help.
func settings() []Setting {
	return []Setting{
		{"data_dir", "./data", "directory for embedded Kafka, ClickHouse and Redis data"},
		{"log.level", "info", "log level: debug, info, warn, error"},
		{"log.format", "text", "log format: text or json"},
		{"debug.pprof", false, "serve Go's /debug/pprof/ profiles next to /metrics (collector and aggregator addresses)"},
		{"runtime.gc_percent", 100, "Go's GOGC: how far the heap grows, in percent of the live heap, before the next collection; higher collects less often for more memory, -1 only at runtime.memory_limit (ignored when the GOGC environment variable is set)"},
		{"runtime.memory_limit", "auto", "Go's soft memory limit (GOMEMLIMIT), near which the collector works harder rather than let the kernel kill the process: auto (a share of the container's memory limit: 0.9, 0.5 for pipeline, whose embedded engines allocate outside Go; none without a limit), off, or a size such as 1.5GiB (ignored when the GOMEMLIMIT environment variable is set)"},
		{"runtime.procs_per_cpu", 0, "Go scheduler slots (GOMAXPROCS) per CPU the process may use; 0: the binary's own (1; 4 for pipeline, whose embedded ClickHouse holds slots in its calls); above 1 one stays free to notice ready connections at once (ignored when the GOMAXPROCS environment variable is set)"},

		{"kafka.brokers", []string{}, "Kafka seed brokers (host:port,...); empty runs the embedded broker (all-in-one only)"},
		{"kafka.partitions", 8, "partitions per topic when tally creates its topics (an existing topic keeps its count; likes must never change it: deploy/README.md)"},
		{"kafka.replication_factor", 0, "replicas of each partition when tally creates its topics; 0: min(3, brokers in the cluster), so 1 on the embedded broker and 3 on a cluster"},
		{"kafka.min_insync_replicas", 0, "min.insync.replicas of the topics tally creates (with acks=all, a write needs this many replicas); 0: replication_factor - 1, at least 1"},
		{"kafka.views_retention", 7 * 24 * time.Hour, "how long the views, clicks and fraud_verdicts topics keep records (the sink's files keep them after); the likes topic is always kept forever"},
		{"kafka.produce_timeout", 10 * time.Second, "how long an ingest request waits for Kafka before answering 503"},
		{"kafka.max_buffered_records", 200000, "producer buffer bound; beyond it ingest answers 503 instead of queueing"},
		{"kafka.compression", "lz4", "codec of the record batches tally produces: lz4, zstd, snappy, gzip or none (consumers need nothing)"},
		{"kafka.record_format", "protobuf", "format of the records tally writes: protobuf (tally.v1.Record, schemas/proto/tally.proto), or v1, the format before it, only while a rolling upgrade still runs readers that read nothing else (every reader reads both)"},
		{"kafka.schema_id", 0, "the id your schema registry gave schemas/proto/tally.proto (deploy/README.md): protobuf records then carry the registry's framing, as its deserializers expect; 0: plain Protobuf"},
		{"kafka.sasl.mechanism", "", "SASL mechanism for kafka.brokers: empty (none), SCRAM-SHA-256, SCRAM-SHA-512, or, over TLS only, PLAIN or OAUTHBEARER"},
		{"kafka.sasl.username", "", "SASL user (SCRAM, PLAIN)"},
		{"kafka.sasl.password", "", "SASL password (SCRAM, PLAIN)"},
		{"kafka.sasl.token_file", "", "OAUTHBEARER: file holding the bearer token, read again at every authentication (keep it fresh with your token agent)"},
		{"kafka.tls.enabled", false, "connect to Kafka over TLS (certificates are always verified)"},
		{"kafka.tls.ca_file", "", "PEM CA bundle Kafka's certificate must chain to; empty: the system's roots"},
		{"kafka.tls.cert_file", "", "PEM client certificate for Kafka (with kafka.tls.key_file), if it requires one"},
		{"kafka.tls.key_file", "", "PEM key of kafka.tls.cert_file"},
		{"kafka.tls.server_name", "", "name Kafka's certificate must carry; empty: the host dialled"},

		{"clickhouse.addr", "", "ClickHouse HTTP endpoint host:port; empty runs the embedded engine (all-in-one only)"},
		{"clickhouse.cluster", "", "ClickHouse cluster name (remote_servers): migrations run ON CLUSTER with Replicated engines and add <table>_dist Distributed tables for reads; empty: one server (deploy/README.md)"},
		{"clickhouse.quorum", false, "with clickhouse.cluster: every INSERT waits for a majority of the replicas and every SELECT reads what they acknowledged, so a process may move to another replica at any time; off: each process must stay on one replica (deploy/README.md)"},
		{"clickhouse.database", "tally", "ClickHouse database holding tally's tables"},
		{"clickhouse.username", "default", "ClickHouse user (the embedded engine's pipeline user: its administrator)"},
		{"clickhouse.password", "", "ClickHouse password; empty with the embedded engine: a generated one, kept in <data_dir>/infra.env (mode 0600)"},
		{"clickhouse.tls.enabled", false, "connect to ClickHouse over TLS (certificates are always verified)"},
		{"clickhouse.tls.ca_file", "", "PEM CA bundle ClickHouse's certificate must chain to; empty: the system's roots"},
		{"clickhouse.tls.cert_file", "", "PEM client certificate for ClickHouse (with clickhouse.tls.key_file), if it requires one"},
		{"clickhouse.tls.key_file", "", "PEM key of clickhouse.tls.cert_file"},
		{"clickhouse.tls.server_name", "", "name ClickHouse's certificate must carry; empty: the host dialled"},

		{"redis.addr", "", "Redis host:port (with redis.sentinel_master: the Sentinels', with redis.cluster: some of the cluster's nodes, comma-separated); empty starts a local redis-server under data_dir (all-in-one only)"},
		{"redis.cluster", false, "redis.addr names nodes of a Redis Cluster; the client sends each command to the node serving its key and follows the cluster through failovers"},
		{"redis.sentinel_master", "", "name the Sentinels monitor the Redis primary under; set, the client asks the Sentinels in redis.addr for the primary and follows it through failovers"},
		{"redis.sentinel_password", "", "the Sentinels' own password (their requirepass); empty: none"},
		{"redis.username", "", "Redis ACL user; empty with a password: the default user (requirepass)"},
		{"redis.password", "", "Redis password"},
		{"redis.tls.enabled", false, "connect to Redis over TLS (certificates are always verified)"},
		{"redis.tls.ca_file", "", "PEM CA bundle Redis's certificate must chain to; empty: the system's roots"},
		{"redis.tls.cert_file", "", "PEM client certificate for Redis (with redis.tls.key_file), if it requires one"},
		{"redis.tls.key_file", "", "PEM key of redis.tls.cert_file"},
		{"redis.tls.server_name", "", "name Redis's certificate must carry; empty: the host dialled"},

		{"shutdown.timeout", 20 * time.Second, "bound on graceful shutdown"},
	}
}

// Validate checks the shared settings and names every bad key.
func (c Config) Validate() error { return c.validate(nil) }

// validate checks the shared settings, then each section's, then shutdown, and names every bad key.
func (c Config) validate(sections []Section) error {
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
	if c.Runtime.ProcsPerCPU < 0 || c.Runtime.ProcsPerCPU > 64 {
		bad("runtime.procs_per_cpu", "got %d; want 0 (the binary's own) or 1..64", c.Runtime.ProcsPerCPU)
	}
	if c.Runtime.GCPercent < -1 || c.Runtime.GCPercent == 0 || c.Runtime.GCPercent > 10000 {
		bad("runtime.gc_percent", "got %d; want 1..10000, or -1 (collect only near runtime.memory_limit)", c.Runtime.GCPercent)
	}
	if _, err := c.Runtime.GoMemoryLimit(1, 0); err != nil {
		bad("runtime.memory_limit", "%v", err)
	} else if c.Runtime.GCPercent == -1 && c.Runtime.MemoryLimit == "off" {
		bad("runtime.gc_percent", "got -1 with runtime.memory_limit off; want a limit the collector works to, or a percentage")
	}
	for _, b := range c.Kafka.Brokers {
		CheckHostPort(bad, "kafka.brokers", b)
	}
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
	if _, err := kafka.ParseCompression(c.Kafka.Compression); err != nil {
		bad("kafka.compression", "%v", err)
	}
	if _, err := schemas.ParseEncoding(c.Kafka.RecordFormat, 0); err != nil {
		bad("kafka.record_format", "%v", err)
	} else if _, err := schemas.ParseEncoding(c.Kafka.RecordFormat, c.Kafka.SchemaID); err != nil {
		bad("kafka.schema_id", "%v", err)
	}
	if c.ClickHouse.Addr != "" {
		CheckHostPort(bad, "clickhouse.addr", c.ClickHouse.Addr)
	}
	if c.ClickHouse.Cluster != "" && !Identifier(c.ClickHouse.Cluster) {
		bad("clickhouse.cluster", "got %q; want letters, digits and underscores (a name in remote_servers)", c.ClickHouse.Cluster)
	}
	if c.ClickHouse.Quorum && c.ClickHouse.Cluster == "" {
		bad("clickhouse.quorum", "got true with no clickhouse.cluster; quorum inserts need replicas")
	}
	if c.ClickHouse.Cluster != "" && c.ClickHouse.Addr == "" {
		bad("clickhouse.cluster", "got %q with no clickhouse.addr; the embedded engine is one server", c.ClickHouse.Cluster)
	}
	if !Identifier(c.ClickHouse.Database) {
		bad("clickhouse.database", "got %q; want letters, digits and underscores", c.ClickHouse.Database)
	}
	c.validateRedisAddr(bad)
	c.validateBackendSecurity(bad)
	for _, sec := range sections {
		sec.Validate(&c, bad)
	}
	Positive(bad, "shutdown.timeout", c.Shutdown.Timeout)
	return errors.Join(errs...)
}

// Positive records key as bad unless d is more than zero.
func Positive(bad Bad, key string, d time.Duration) {
	if d <= 0 {
		bad(key, "got %s; want a positive duration such as 500ms or 10s", d)
	}
}

// CheckHostPort records key as bad unless v is host:port.
func CheckHostPort(bad Bad, key, v string) {
	if _, _, err := net.SplitHostPort(v); err != nil {
		bad(key, "got %q; want host:port", v)
	}
}

// validateRedisAddr checks redis.addr: one host:port, or with redis.sentinel_master the
// Sentinels' list, or with redis.cluster the cluster nodes' list.
func (c Config) validateRedisAddr(bad Bad) {
	r := c.Redis
	switch {
	case r.Cluster && r.SentinelMaster != "":
		bad("redis.cluster", "and redis.sentinel_master are both set; a Redis Cluster fails over on its own, without Sentinels")
	case r.Cluster && r.Addr == "":
		bad("redis.cluster", "is set but redis.addr is empty; list some of the cluster's nodes there (host:port,host:port,...)")
	case r.SentinelMaster != "" && r.Addr == "":
		bad("redis.sentinel_master", "is set but redis.addr is empty; list the Sentinels there (host:port,host:port,...)")
	case r.Cluster || r.SentinelMaster != "":
		for _, a := range r.Options().Addrs() {
			CheckHostPort(bad, "redis.addr", a)
		}
	case r.SentinelPassword != "":
		bad("redis.sentinel_password", "is set but redis.sentinel_master is empty")
	case r.Addr != "":
		CheckHostPort(bad, "redis.addr", r.Addr)
	}
}

// Identifier reports whether s is a non-empty run of letters, digits and underscores.
func Identifier(s string) bool {
	if s == "" {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0
}

// SharedSettings lists the shared keys, for checks that compare every key a binary reads (e.g.
// against config.example.yaml).
func SharedSettings() []Setting { return settings() }
