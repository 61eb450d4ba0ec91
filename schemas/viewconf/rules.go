// Package viewconf is the views section of the configuration (views.*): the dedupe rule the
// streaming count (the aggregator's views rule set) and the nightly recount (batchjob views)
// must agree on. It sits with the shared contract, as package clickconf does for clicks, so
// that both binaries load the same rule without either importing the other's settings. The
// section is plain data, filled in once by config.Load.
package viewconf

import (
	"time"

	"github.com/tallypipeline/tally/platform/config"
)

// Rules is the views dedupe rule: a view counts once per viewer and item within Window of
// event time, and a view up to Grace behind its partition's newest event is still
// deduplicated against the whole window.
type Rules struct {
	DedupeWindow time.Duration `mapstructure:"dedupe_window"`
	DedupeGrace  time.Duration `mapstructure:"dedupe_grace"`
}

// Name is the section's top-level key.
func (*Rules) Name() string { return "views" }

// Settings declares the views rule's keys once: default and one-line help.
func (*Rules) Settings() []config.Setting {
	return []config.Setting{
		{Key: "views.dedupe_window", Default: 30 * time.Minute, Help: "a view counts once per viewer and item within this much event time"},
		{Key: "views.dedupe_grace", Default: 10 * time.Minute, Help: "how far behind the partition's newest event a late view is still deduplicated"},
	}
}

// Validate checks the rule and names every bad key.
func (r *Rules) Validate(_ *config.Config, bad config.Bad) {
	config.Positive(bad, "views.dedupe_window", r.DedupeWindow)
	if r.DedupeGrace < 0 {
		bad("views.dedupe_grace", "got %s; want zero or more", r.DedupeGrace)
	}
}

// Held is how much event time behind a partition's newest view the rule still needs: a
// recount that starts this far before a day rebuilds the state the day starts with.
func (r *Rules) Held() time.Duration { return r.DedupeWindow + r.DedupeGrace }
