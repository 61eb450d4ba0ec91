package clickconf

import (
	"time"

	"github.com/tallypipeline/tally/platform/config"
)

// Rules is the aggregator's part of the clicks section: the click path's consumer group and the
// counting rules the streaming count and batchjob clicks must agree on.
type Rules struct {
	Group               string        `mapstructure:"group"`
	DedupeWindow        time.Duration `mapstructure:"dedupe_window"`
	DedupeGrace         time.Duration `mapstructure:"dedupe_grace"`
	FraudScoreThreshold float64       `mapstructure:"fraud_score_threshold"`
	CountedTTL          time.Duration `mapstructure:"counted_ttl"`
}

const day = 24 * time.Hour

// Name is the section's top-level key.
func (*Rules) Name() string { return "clicks" }

// Settings declares the counting rules' keys once: default and one-line help.
func (*Rules) Settings() []config.Setting {
	return []config.Setting{
		{Key: "clicks.group", Default: "tally-aggregator-clicks", Help: "Kafka consumer group of the aggregators' click path (topics clicks and fraud_verdicts)"},
		{Key: "clicks.dedupe_window", Default: 10 * time.Minute, Help: "a click id counts once within this much event time"},
		{Key: "clicks.dedupe_grace", Default: 10 * time.Minute, Help: "how far behind the partition's newest click a late click is still deduplicated"},
		{Key: "clicks.fraud_score_threshold", Default: 1.0, Help: "clicks whose fraud_score is above this are counted but not billable; 1 disables"},
		{Key: "clicks.counted_ttl", Default: 8 * day, Help: "retention of the counted clicks late fraud verdicts are resolved against (a verdict for an older click corrects only the nightly report)"},
	}
}

// Validate checks the counting rules and names every bad key; that clicks.group differs from
// aggregator.group is checked by the aggregator's settings, which hold both.
func (c *Rules) Validate(_ *config.Config, bad config.Bad) {
	if c.Group == "" {
		bad("clicks.group", "must not be empty")
	}
	config.Positive(bad, "clicks.dedupe_window", c.DedupeWindow)
	if c.DedupeGrace < 0 {
		bad("clicks.dedupe_grace", "got %s; want zero or more", c.DedupeGrace)
	}
	if !(c.FraudScoreThreshold >= 0 && c.FraudScoreThreshold <= 1) {
		bad("clicks.fraud_score_threshold", "got %v; want 0..1 (1 disables)", c.FraudScoreThreshold)
	}
	if c.CountedTTL < 2*day || c.CountedTTL%day != 0 {
		bad("clicks.counted_ttl", "got %s; want a whole number of days, at least 2 (e.g. 192h)", c.CountedTTL)
	}
}
