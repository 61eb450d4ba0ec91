package topk

import (
	"time"

	"github.com/tallypipeline/tally/platform/config"
)

// Settings is topk's section of the configuration (topk.*), loaded by config.Load beside the
// shared sections.
type Settings struct {
	Addr             string        `mapstructure:"addr"`
	PublishInterval  time.Duration `mapstructure:"publish_interval"`
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	Shards           int           `mapstructure:"shards"`
	DayCounters      int           `mapstructure:"day_counters"`
	HistoryK         int           `mapstructure:"history_k"`
	ColdReplay       time.Duration `mapstructure:"cold_replay"`
}

// Name is the section's top-level key.
func (*Settings) Name() string { return "topk" }

// Settings declares every topk key once: its default and its one-line help.
func (*Settings) Settings() []config.Setting {
	return []config.Setting{
		{Key: "topk.addr", Default: "127.0.0.1:8082", Help: "topk admin listen address (/healthz, /readyz, /metrics)"},
		{Key: "topk.publish_interval", Default: 2 * time.Second, Help: "how often the top-K lists are published (Redis for the API, the compacted topk topic, ClickHouse topk_snapshots)"},
		{Key: "topk.snapshot_interval", Default: 30 * time.Second, Help: "how often topk saves its state and offsets to <data_dir>/topk/snapshot (a restart replays the counted topic from there)"},
		{Key: "topk.shards", Default: 16, Help: "shards of the exact 1m and 1h windows (each key counted in one; the lists are merged from each shard's top 1000)"},
		{Key: "topk.day_counters", Default: 4096, Help: "Space-Saving counters per hour of the 24h window: each 24h count is within N/day_counters of the truth, N the window's events"},
		{Key: "topk.history_k", Default: 100, Help: "entries of each published list written to ClickHouse topk_snapshots (0: none)"},
		{Key: "topk.cold_replay", Default: 25 * time.Hour, Help: "with no snapshot, how far back (in publish time) the counted topic is replayed; at least 1h5m keeps the 1m and 1h lists exact"},
	}
}

// Validate checks topk's settings and names every bad key.
func (t *Settings) Validate(_ *config.Config, bad config.Bad) {
	config.CheckHostPort(bad, "topk.addr", t.Addr)
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
