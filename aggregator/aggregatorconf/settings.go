// Package aggregatorconf is the aggregator's section of the configuration (aggregator.*), loaded
// with the rule sets' sections it counts by (views.*: viewconf.Rules; its part of clicks.*:
// clickconf.Rules). It is a leaf of its own so that the all-in-one loads it without linking the
// aggregator. The sections are plain data, filled in once by config.Load.
package aggregatorconf

import (
	"time"

	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/schemas/clickconf"
	"github.com/tallypipeline/tally/schemas/viewconf"
)

// Settings is the aggregator's section of the configuration (aggregator.*), loaded by
// config.Load beside the shared sections.
type Settings struct {
	Addr           string        `mapstructure:"addr"`
	Group          string        `mapstructure:"group"`
	InstanceID     string        `mapstructure:"instance_id"`
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	FlushInterval  time.Duration `mapstructure:"flush_interval"`
	SketchInterval time.Duration `mapstructure:"sketch_interval"`
	FoldInterval   time.Duration `mapstructure:"sketch_fold_interval"`
	MaxBatch       int           `mapstructure:"max_batch"`
	TTLSeconds     time.Duration `mapstructure:"ttl_seconds"`
	TTLMinutes     time.Duration `mapstructure:"ttl_minutes"`
	TTLDays        time.Duration `mapstructure:"ttl_days"`
	PublishCounted bool          `mapstructure:"publish_counted"`

	// Views and Clicks are the rule sets' sections, loaded beside this one (Sections).
	Views  viewconf.Rules  `mapstructure:"-"`
	Clicks clickconf.Rules `mapstructure:"-"`
}

const day = 24 * time.Hour

// Name is the section's top-level key.
func (*Settings) Name() string { return "aggregator" }

// Sections lists the aggregator's sections for config.Load: aggregator.*, views.* and its part
// of clicks.*.
func (c *Settings) Sections() []config.Section {
	return []config.Section{c, &c.Views, &c.Clicks}
}

// Settings declares every aggregator key once: its default and its one-line help.
func (*Settings) Settings() []config.Setting {
	return []config.Setting{
		{Key: "aggregator.addr", Default: "127.0.0.1:8081", Help: "aggregator admin listen address (/healthz, /readyz, /metrics)"},
		{Key: "aggregator.group", Default: "tally-aggregator", Help: "Kafka consumer group of the aggregators"},
		{Key: "aggregator.instance_id", Default: "", Help: "static group membership id (e.g. the pod name): an aggregator restarted after a crash takes back its partitions at once (a stopping one leaves the group)"},
		{Key: "aggregator.session_timeout", Default: 10 * time.Second, Help: "how long the group waits for a silent aggregator before moving its partitions"},
		{Key: "aggregator.flush_interval", Default: 500 * time.Millisecond, Help: "how often aggregated batches are written to ClickHouse and Redis (after a flush slower than this, the next waits half that flush's time)"},
		{Key: "aggregator.sketch_interval", Default: 5 * time.Second, Help: "how often the viewers added to the unique-viewer sketches are written to ClickHouse as sketch deltas (a crash replays the views since into them) and, half an interval later, the batches since are added to the rollups (series, dashboards; a crash repairs them from the deltas)"},
		{Key: "aggregator.sketch_fold_interval", Default: 10 * time.Minute, Help: "how often each sketch with deltas has its whole version rewritten into unique_viewers, spread over the interval (readers union the deltas since; at most a day: the deltas are kept 2 days)"},
		{Key: "aggregator.max_batch", Default: 200000, Help: "records per partition batch before an early flush"},
		{Key: "aggregator.ttl_seconds", Default: 7 * day, Help: "retention of per-second totals"},
		{Key: "aggregator.ttl_minutes", Default: 90 * day, Help: "retention of per-minute totals and unique-viewer sketches"},
		{Key: "aggregator.ttl_days", Default: 730 * day, Help: "retention of per-hour totals (views, unique viewers, clicks); per-day view totals are kept as long as the all-time ones"},
		{Key: "aggregator.publish_counted", Default: true, Help: "publish each durable batch's deduplicated counts to the counted topic, topk's input"},
	}
}

// Validate checks the aggregator's settings and names every bad key.
func (c *Settings) Validate(shared *config.Config, bad config.Bad) {
	config.CheckHostPort(bad, "aggregator.addr", c.Addr)
	if c.Group == "" {
		bad("aggregator.group", "must not be empty")
	}
	if c.Clicks.Group == c.Group {
		bad("clicks.group", "got %q; want a consumer group of its own (not aggregator.group)", c.Clicks.Group)
	}
	config.Positive(bad, "aggregator.flush_interval", c.FlushInterval)
	if c.SketchInterval < c.FlushInterval {
		bad("aggregator.sketch_interval", "got %s; want at least aggregator.flush_interval (%s)", c.SketchInterval, c.FlushInterval)
	}
	if c.FoldInterval < c.SketchInterval || c.FoldInterval > day {
		bad("aggregator.sketch_fold_interval", "got %s; want from aggregator.sketch_interval (%s) to 24h", c.FoldInterval, c.SketchInterval)
	}
	if c.SessionTimeout < time.Second {
		bad("aggregator.session_timeout", "got %s; want at least 1s", c.SessionTimeout)
	}
	if c.MaxBatch < 1 || c.MaxBatch > 500000 {
		bad("aggregator.max_batch", "got %d; want 1..500000 (one batch must stay one ClickHouse insert block)", c.MaxBatch)
	}
	for _, t := range []struct {
		key string
		d   time.Duration
	}{{"aggregator.ttl_seconds", c.TTLSeconds}, {"aggregator.ttl_minutes", c.TTLMinutes}, {"aggregator.ttl_days", c.TTLDays}} {
		if t.d < day || t.d%day != 0 {
			bad(t.key, "got %s; want a whole number of days (e.g. 168h)", t.d)
		}
	}
}
