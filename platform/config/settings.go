package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"path/filepath"
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
	Clicks     Clicks     `mapstructure:"clicks"`
	TopK       TopK       `mapstructure:"topk"`
	Sink       Sink       `mapstructure:"sink"`
	Batchjob   Batchjob   `mapstructure:"batchjob"`
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
	PublishCounted bool          `mapstructure:"publish_counted"`
}

type TopK struct {
	Addr             string        `mapstructure:"addr"`
	PublishInterval  time.Duration `mapstructure:"publish_interval"`
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	Shards           int           `mapstructure:"shards"`
	DayCounters      int           `mapstructure:"day_counters"`
	HistoryK         int           `mapstructure:"history_k"`
	ColdReplay       time.Duration `mapstructure:"cold_replay"`
}

// Clicks configures the ad-click path: signed click ids at the collector and the streaming
// count in the aggregator (docs/API.md, docs/SECURITY.md).
type Clicks struct {
	SigningKey          string        `mapstructure:"signing_key"`
	Keys                []string      `mapstructure:"keys"`
	MaxRenderAge        time.Duration `mapstructure:"max_render_age"`
	Group               string        `mapstructure:"group"`
	DedupeWindow        time.Duration `mapstructure:"dedupe_window"`
	DedupeGrace         time.Duration `mapstructure:"dedupe_grace"`
	FraudScoreThreshold float64       `mapstructure:"fraud_score_threshold"`
	CountedTTL          time.Duration `mapstructure:"counted_ttl"`
}

// ClickIDKey is one configured click-id key: its id and secret.
type ClickIDKey struct {
	ID     string
	Secret []byte
}

// ClickIDKeys decodes clicks.keys ("id:secret", the secret in unpadded or padded base64url or
// base64); nil when none is configured.
func (c Clicks) ClickIDKeys() ([]ClickIDKey, error) {
	var out []ClickIDKey
	for _, k := range c.Keys {
		id, secret, ok := strings.Cut(strings.TrimSpace(k), ":")
		if !ok || id == "" {
			return nil, fmt.Errorf("got an entry without id:secret; want id:base64url-secret")
		}
		var b []byte
		var err error
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
			if b, err = enc.DecodeString(secret); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: secret is not base64", id)
		}
		out = append(out, ClickIDKey{ID: id, Secret: b})
	}
	return out, nil
}

type Sink struct {
	Addr             string        `mapstructure:"addr"`
	Group            string        `mapstructure:"group"`
	InstanceID       string        `mapstructure:"instance_id"`
	SessionTimeout   time.Duration `mapstructure:"session_timeout"`
	Storage          string        `mapstructure:"storage"`
	Dir              string        `mapstructure:"dir"`
	Rotation         time.Duration `mapstructure:"rotation"`
	MaxBatchBytes    int           `mapstructure:"max_batch_bytes"`
	Retention        time.Duration `mapstructure:"retention"`
	RetentionByTopic []string      `mapstructure:"retention_by_topic"`
	S3               SinkS3        `mapstructure:"s3"`
}

type SinkS3 struct {
	Endpoint  string `mapstructure:"endpoint"`
	Bucket    string `mapstructure:"bucket"`
	Prefix    string `mapstructure:"prefix"`
	Region    string `mapstructure:"region"`
	AccessKey string `mapstructure:"access_key"`
	SecretKey string `mapstructure:"secret_key"`
	Secure    bool   `mapstructure:"secure"`
}

// SinkDir is the sink's local directory: sink.dir, or <data_dir>/sink.
func (c Config) SinkDir() string {
	if c.Sink.Dir != "" {
		return c.Sink.Dir
	}
	return filepath.Join(c.DataDir, "sink")
}

// RetentionOverrides is sink.retention_by_topic by topic.
func (s Sink) RetentionOverrides() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, e := range s.RetentionByTopic {
		topic, d, err := parseTopicRetention(e)
		if err == nil {
			out[topic] = d
		}
	}
	return out
}

func parseTopicRetention(e string) (string, time.Duration, error) {
	topic, ds, ok := strings.Cut(strings.TrimSpace(e), "=")
	if !ok || topic == "" {
		return "", 0, fmt.Errorf("got %q; want topic=duration such as likes=2160h", e)
	}
	d, err := time.ParseDuration(ds)
	if err != nil || d < time.Hour || d%time.Hour != 0 {
		return "", 0, fmt.Errorf("got %q; want a whole number of hours such as likes=2160h", e)
	}
	return topic, d, nil
}

type Batchjob struct {
	ViewsLookback  time.Duration `mapstructure:"views_lookback"`
	ClicksLookback time.Duration `mapstructure:"clicks_lookback"`
	ClicksSkew     time.Duration `mapstructure:"clicks_skew"`
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
		{"aggregator.publish_counted", true, "publish each durable batch's deduplicated counts to the counted topic, topk's input"},

		{"topk.addr", "127.0.0.1:8082", "topk admin listen address (/healthz, /readyz, /metrics)"},
		{"topk.publish_interval", 2 * time.Second, "how often the top-K lists are published (Redis for the API, the compacted topk topic, ClickHouse topk_snapshots)"},
		{"topk.snapshot_interval", 30 * time.Second, "how often topk saves its state and offsets to <data_dir>/topk/snapshot (a restart replays the counted topic from there)"},
		{"topk.shards", 16, "shards of the exact 1m and 1h windows (each key counted in one; the lists are merged from each shard's top 1000)"},
		{"topk.day_counters", 4096, "Space-Saving counters per hour of the 24h window: each 24h count is within N/day_counters of the truth, N the window's events"},
		{"topk.history_k", 100, "entries of each published list written to ClickHouse topk_snapshots (0: none)"},
		{"topk.cold_replay", 25 * time.Hour, "with no snapshot, how far back (in publish time) the counted topic is replayed; at least 1h5m keeps the 1m and 1h lists exact"},

		{"clicks.signing_key", "", "id of the clicks.keys entry new click ids are signed with; empty: click ids are not signed and unsigned ids are accepted (docs/SECURITY.md)"},
		{"clicks.keys", []string{}, "click-id keys as id:secret (secret: at least 32 random bytes in base64url; make one with: head -c32 /dev/urandom | basenc --base64url); clicks verify against every key, so keep an old key listed while its ids may still be clicked"},
		{"clicks.max_render_age", 24 * time.Hour, "with a signing key: a click on an ad rendered longer ago than this is rejected"},
		{"clicks.group", "tally-aggregator-clicks", "Kafka consumer group of the aggregators' click path (topics clicks and fraud_verdicts)"},
		{"clicks.dedupe_window", 10 * time.Minute, "a click id counts once within this much event time"},
		{"clicks.dedupe_grace", 10 * time.Minute, "how far behind the partition's newest click a late click is still deduplicated"},
		{"clicks.fraud_score_threshold", 1.0, "clicks whose fraud_score is above this are counted but not billable; 1 disables"},
		{"clicks.counted_ttl", 8 * day, "retention of the counted clicks late fraud verdicts are resolved against (a verdict for an older click corrects only the nightly report)"},

		{"sink.addr", "127.0.0.1:8082", "sink admin listen address (/healthz, /readyz, /metrics)"},
		{"sink.group", "tally-sink", "Kafka consumer group of the sinks"},
		{"sink.instance_id", "", "static group membership id (e.g. the pod name): a restarted sink takes back its partitions at once"},
		{"sink.session_timeout", 10 * time.Second, "how long the group waits for a silent sink before moving its partitions"},
		{"sink.storage", "local", "where the sink's files go: local (sink.dir) or s3 (sink.s3.*)"},
		{"sink.dir", "", "local directory of the sink's files (and S3 uploads being written); empty: <data_dir>/sink"},
		{"sink.rotation", time.Minute, "longest time an event waits before the file holding it is readable (a partition's open files are closed this often)"},
		{"sink.max_batch_bytes", 128 << 20, "a partition's open files are closed once their events reach this many bytes (decoded size); bounds file size and memory"},
		{"sink.retention", 7 * day, "how long the sink's files are kept, in whole hours (by event hour)"},
		{"sink.retention_by_topic", []string{"likes=2160h"}, "per-topic retention overriding sink.retention: topic=duration, comma-separated (likes are state: kept longer)"},
		{"sink.s3.endpoint", "", "S3-compatible endpoint host:port (sink.storage=s3)"},
		{"sink.s3.bucket", "", "bucket of the sink's files (must exist)"},
		{"sink.s3.prefix", "", "key prefix of the sink's files in the bucket, e.g. tally/"},
		{"sink.s3.region", "", "bucket region; empty: the endpoint's default"},
		{"sink.s3.access_key", "", "S3 access key"},
		{"sink.s3.secret_key", "", "S3 secret key"},
		{"sink.s3.secure", true, "talk to the S3 endpoint over HTTPS"},

		{"batchjob.views_lookback", time.Hour, "batchjob views: event time read before the day to rebuild the dedupe state the day starts with (at least aggregator.dedupe_window + aggregator.dedupe_grace)"},

		{"demo.enabled", true, "all-in-one: run the built-in demo workload"},
		{"demo.rate", 200, "demo workload: view events per second"},
		{"demo.items", 50, "demo workload: number of items"},

		{"shutdown.timeout", 20 * time.Second, "bound on graceful shutdown"},

		{"batchjob.clicks_lookback", 24 * time.Hour, "batchjob clicks: clicks stamped this long before the day are read too, so a repeat of an earlier day's click is not counted again (at least clicks.max_render_age, the longest a click id is accepted after its render)"},
		{"batchjob.clicks_skew", time.Hour, "batchjob clicks: allowance for clock skew between the collectors' and the brokers' clocks when the log is read by produce time (around collector.future_bound and collector.late_bound)"},
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
	positive(bad, "batchjob.clicks_lookback", c.Batchjob.ClicksLookback)
	positive(bad, "batchjob.clicks_skew", c.Batchjob.ClicksSkew)
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
	c.validateClicks(bad)
	c.TopK.validate(bad)
	c.validateSink(bad)
	if c.Batchjob.ViewsLookback < c.Aggregator.DedupeWindow+c.Aggregator.DedupeGrace {
		bad("batchjob.views_lookback", "got %s; want at least aggregator.dedupe_window + aggregator.dedupe_grace (%s)", c.Batchjob.ViewsLookback, c.Aggregator.DedupeWindow+c.Aggregator.DedupeGrace)
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

func (t TopK) validate(bad func(string, string, ...any)) {
	checkHostPort(bad, "topk.addr", t.Addr)
	if t.PublishInterval < 100*time.Millisecond {
		bad("topk.publish_interval", "got %s; want at least 100ms", t.PublishInterval)
	}
	if t.SnapshotInterval < time.Second {
		bad("topk.snapshot_interval", "got %s; want at least 1s", t.SnapshotInterval)
	}
	if t.Shards < 1 || t.Shards > 1024 {
		bad("topk.shards", "got %d; want 1..1024", t.Shards)
	}
	if t.DayCounters < 100 || t.DayCounters > 1<<20 {
		bad("topk.day_counters", "got %d; want 100..1048576", t.DayCounters)
	}
	if t.HistoryK < 0 || t.HistoryK > 1000 {
		bad("topk.history_k", "got %d; want 0..1000", t.HistoryK)
	}
	if t.ColdReplay < time.Hour+5*time.Minute {
		bad("topk.cold_replay", "got %s; want at least 1h5m (the 1h window, its bucket and the future bound)", t.ColdReplay)
	}
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

func (c Config) validateClicks(bad func(string, string, ...any)) {
	k := c.Clicks
	keys, err := k.ClickIDKeys()
	if err != nil {
		bad("clicks.keys", "%v", err)
	}
	seen := map[string]bool{}
	for _, key := range keys {
		if len(key.Secret) < 32 {
			bad("clicks.keys", "key %q: secret is %d bytes; want at least 32", key.ID, len(key.Secret))
		}
		if seen[key.ID] {
			bad("clicks.keys", "key %q is listed twice", key.ID)
		}
		seen[key.ID] = true
	}
	if k.SigningKey != "" && !seen[k.SigningKey] {
		bad("clicks.signing_key", "got %q; want the id of one of clicks.keys", k.SigningKey)
	}
	if k.SigningKey == "" && len(keys) > 0 {
		bad("clicks.signing_key", "is empty while clicks.keys lists keys; name the key to sign with")
	}
	positive(bad, "clicks.max_render_age", k.MaxRenderAge)
	if k.Group == "" || k.Group == c.Aggregator.Group {
		bad("clicks.group", "got %q; want a consumer group of its own (not aggregator.group)", k.Group)
	}
	positive(bad, "clicks.dedupe_window", k.DedupeWindow)
	if k.DedupeGrace < 0 {
		bad("clicks.dedupe_grace", "got %s; want zero or more", k.DedupeGrace)
	}
	if !(k.FraudScoreThreshold >= 0 && k.FraudScoreThreshold <= 1) {
		bad("clicks.fraud_score_threshold", "got %v; want 0..1 (1 disables)", k.FraudScoreThreshold)
	}
	if k.CountedTTL < 2*day || k.CountedTTL%day != 0 {
		bad("clicks.counted_ttl", "got %s; want a whole number of days, at least 2 (e.g. 192h)", k.CountedTTL)
	}
}

func (c Config) validateSink(bad func(string, string, ...any)) {
	s := c.Sink
	checkHostPort(bad, "sink.addr", s.Addr)
	if s.Group == "" {
		bad("sink.group", "must not be empty")
	}
	if s.SessionTimeout < time.Second {
		bad("sink.session_timeout", "got %s; want at least 1s", s.SessionTimeout)
	}
	switch s.Storage {
	case "local":
	case "s3":
		if s.S3.Endpoint == "" {
			bad("sink.s3.endpoint", "must be set when sink.storage is s3")
		} else {
			checkHostPort(bad, "sink.s3.endpoint", s.S3.Endpoint)
		}
		if s.S3.Bucket == "" {
			bad("sink.s3.bucket", "must be set when sink.storage is s3")
		}
	default:
		bad("sink.storage", "got %q; want local or s3", s.Storage)
	}
	if s.Rotation < time.Second || s.Rotation > time.Hour {
		bad("sink.rotation", "got %s; want 1s..1h", s.Rotation)
	}
	if s.MaxBatchBytes < 1<<20 {
		bad("sink.max_batch_bytes", "got %d; want at least 1048576 (1 MiB)", s.MaxBatchBytes)
	}
	if s.Retention < time.Hour || s.Retention%time.Hour != 0 {
		bad("sink.retention", "got %s; want a whole number of hours (e.g. 168h)", s.Retention)
	}
	for _, e := range s.RetentionByTopic {
		if _, _, err := parseTopicRetention(e); err != nil {
			bad("sink.retention_by_topic", "%v", err)
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
