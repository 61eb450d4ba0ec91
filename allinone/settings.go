package allinone

import "github.com/tallypipeline/tally/platform/config"

// Components is the all-in-one's own section (allinone.*): which of the optional components it
// runs beside the collector and the aggregator. Both default to on; a machine that needs every
// core for counting leaves them out (the sink's raw-log files are then not written, and the
// nightly jobs read Kafka instead; GET /v1/top answers that no list is published).
type Components struct {
	Sink bool `mapstructure:"sink"`
	TopK bool `mapstructure:"topk"`
}

// Name is the section's top-level key.
func (*Components) Name() string { return "allinone" }

// Settings declares the all-in-one's keys once: default and one-line help.
func (*Components) Settings() []config.Setting {
	return []config.Setting{
		{Key: "allinone.sink", Default: true, Help: "all-in-one: run the sink (the raw log as hourly files for the nightly jobs)"},
		{Key: "allinone.topk", Default: true, Help: "all-in-one: run the top-K tracker (GET /v1/top)"},
	}
}

// Validate has nothing to check: any combination runs.
func (*Components) Validate(*config.Config, config.Bad) {}
