// Package batchjob holds the nightly jobs' own section of the configuration (batchjob.*); the
// jobs themselves live in reconcile (likes), clicks and recount (views), and cmd/batchjob wires
// them. The section is plain data, loaded once per run.
package batchjob

import (
	"time"

	"github.com/tallypipeline/tally/platform/config"
)

// Settings is the batchjob section.
type Settings struct {
	ViewsLookback  time.Duration `mapstructure:"views_lookback"`
	ClicksLookback time.Duration `mapstructure:"clicks_lookback"`
	ClicksSkew     time.Duration `mapstructure:"clicks_skew"`
	LockTTL        time.Duration `mapstructure:"lock_ttl"`
}

// Name is the section's top-level key.
func (*Settings) Name() string { return "batchjob" }

// Settings declares every batchjob key once: its default and its one-line help.
func (*Settings) Settings() []config.Setting {
	return []config.Setting{
		{Key: "batchjob.views_lookback", Default: time.Hour, Help: "batchjob views: event time read before the day to rebuild the dedupe state the day starts with (at least views.dedupe_window + views.dedupe_grace)"},
		{Key: "batchjob.clicks_lookback", Default: 24 * time.Hour, Help: "batchjob clicks: clicks stamped this long before the day are read too, so a repeat of an earlier day's click is not counted again (at least clicks.max_render_age, the longest a click id is accepted after its render)"},
		{Key: "batchjob.clicks_skew", Default: time.Hour, Help: "batchjob clicks: allowance for clock skew between the collectors' and the brokers' clocks when the log is read by produce time (around collector.future_bound and collector.late_bound)"},
		{Key: "batchjob.lock_ttl", Default: 30 * time.Second, Help: "every job: how long a run's Redis lock outlives a run that died without releasing it (renewed every third of it while the run lives); a rerun before then exits 3"},
	}
}

// Validate checks the section; the views lookback's bound against the dedupe rule is checked by
// batchjob views, which loads the aggregator's section too.
func (s *Settings) Validate(_ *config.Config, bad config.Bad) {
	config.Positive(bad, "batchjob.views_lookback", s.ViewsLookback)
	config.Positive(bad, "batchjob.clicks_lookback", s.ClicksLookback)
	config.Positive(bad, "batchjob.clicks_skew", s.ClicksSkew)
	if s.LockTTL < 3*time.Second {
		bad("batchjob.lock_ttl", "got %s; want at least 3s (the lock is renewed every third of it)", s.LockTTL)
	}
}
