// Package sinkconf is the sink's section of the configuration (sink.*) and the opening of the
// store it names. It is a leaf of its own so that the nightly jobs, which read the sink's files
// (sink/store, sink/rawlog), load the same section without linking the sink component. The
// section is plain data, filled in once by config.Load.
package sinkconf

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/sink/store"
)

// Settings is the sink's section of the configuration (sink.*), loaded by config.Load beside the
// shared sections. The batch jobs that read the sink's files load it too.
type Settings struct {
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
	S3               S3Settings    `mapstructure:"s3"`
}

// S3Settings locate the bucket when sink.storage is s3.
type S3Settings struct {
	Endpoint  string `mapstructure:"endpoint"`
	Bucket    string `mapstructure:"bucket"`
	Prefix    string `mapstructure:"prefix"`
	Region    string `mapstructure:"region"`
	AccessKey string `mapstructure:"access_key"`
	SecretKey string `mapstructure:"secret_key"`
	Secure    bool   `mapstructure:"secure"`
}

const day = 24 * time.Hour

// staleTemp is the age past which a temporary file is taken for the leftover of a crash.
const staleTemp = time.Hour

// Name is the section's top-level key.
func (*Settings) Name() string { return "sink" }

// Settings declares every sink key once: its default and its one-line help.
func (*Settings) Settings() []config.Setting {
	return []config.Setting{
		{Key: "sink.addr", Default: "127.0.0.1:8083", Help: "sink admin listen address (/healthz, /readyz, /metrics)"},
		{Key: "sink.group", Default: "tally-sink", Help: "Kafka consumer group of the sinks"},
		{Key: "sink.instance_id", Default: "", Help: "static group membership id (e.g. the pod name): a sink restarted after a crash takes back its partitions at once (a stopping one leaves the group)"},
		{Key: "sink.session_timeout", Default: 10 * time.Second, Help: "how long the group waits for a silent sink before moving its partitions"},
		{Key: "sink.storage", Default: "local", Help: "where the sink's files go: local (sink.dir) or s3 (sink.s3.*)"},
		{Key: "sink.dir", Default: "", Help: "local directory of the sink's files (and S3 uploads being written); empty: <data_dir>/sink"},
		{Key: "sink.rotation", Default: time.Minute, Help: "longest time an event waits before the file holding it is readable (a partition's open files are closed this often)"},
		{Key: "sink.max_batch_bytes", Default: 128 << 20, Help: "a partition's open files are closed once their events reach this many bytes (decoded size); bounds file size and memory"},
		{Key: "sink.retention", Default: 7 * day, Help: "how long the sink's files are kept, in whole hours (by event hour)"},
		{Key: "sink.retention_by_topic", Default: []string{"likes=2160h"}, Help: "per-topic retention overriding sink.retention: topic=duration, comma-separated (likes are state: kept longer)"},
		{Key: "sink.s3.endpoint", Default: "", Help: "S3-compatible endpoint host:port (sink.storage=s3)"},
		{Key: "sink.s3.bucket", Default: "", Help: "bucket of the sink's files (must exist)"},
		{Key: "sink.s3.prefix", Default: "", Help: "key prefix of the sink's files in the bucket, e.g. tally/"},
		{Key: "sink.s3.region", Default: "", Help: "bucket region; empty: the endpoint's default"},
		{Key: "sink.s3.access_key", Default: "", Help: "S3 access key"},
		{Key: "sink.s3.secret_key", Default: "", Help: "S3 secret key"},
		{Key: "sink.s3.secure", Default: true, Help: "talk to the S3 endpoint over HTTPS"},
	}
}

// Validate checks the sink's settings and names every bad key.
func (s *Settings) Validate(_ *config.Config, bad config.Bad) {
	config.CheckHostPort(bad, "sink.addr", s.Addr)
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
			config.CheckHostPort(bad, "sink.s3.endpoint", s.S3.Endpoint)
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

// DirIn is the sink's local directory: sink.dir, or <data_dir>/sink.
func (s *Settings) DirIn(cfg *config.Config) string {
	if s.Dir != "" {
		return s.Dir
	}
	return filepath.Join(cfg.DataDir, "sink")
}

// RetentionOverrides is sink.retention_by_topic by topic.
func (s *Settings) RetentionOverrides() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, e := range s.RetentionByTopic {
		if topic, d, err := parseTopicRetention(e); err == nil {
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

// OpenStore opens the store these settings name and removes temporary files a crash left
// behind. The sink writes its files there; the batch jobs open the same store to read them.
func (s *Settings) OpenStore(ctx context.Context, cfg *config.Config, logger *slog.Logger) (store.Store, error) {
	dir := s.DirIn(cfg)
	var st store.Store
	var err error
	var temps string
	switch s.Storage {
	case "s3":
		s3 := s.S3
		temps = filepath.Join(dir, "spool")
		st, err = store.NewS3(ctx, store.S3Options{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: s3.Prefix, Region: s3.Region,
			AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Secure: s3.Secure, SpoolDir: temps})
	default:
		temps = dir
		st, err = store.NewLocal(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open sink store: %w", err)
	}
	if n, err := store.RemoveStaleTemps(temps, time.Now().Add(-staleTemp)); err != nil {
		logger.Warn("remove stale temporary sink files", "dir", temps, "err", err)
	} else if n > 0 {
		logger.Info("removed temporary sink files left by a crash", "dir", temps, "files", n)
	}
	return st, nil
}
