package demo

import "github.com/tallypipeline/tally/platform/config"

// Settings is the demo workload's section of the configuration (demo.*), read by the all-in-one.
type Settings struct {
	Enabled bool `mapstructure:"enabled"`
	Rate    int  `mapstructure:"rate"`
	Items   int  `mapstructure:"items"`
}

// Name is the section's top-level key.
func (*Settings) Name() string { return "demo" }

// Settings declares every demo key once: its default and its one-line help.
func (*Settings) Settings() []config.Setting {
	return []config.Setting{
		{Key: "demo.enabled", Default: true, Help: "all-in-one: run the built-in demo workload"},
		{Key: "demo.rate", Default: 200, Help: "demo workload: view events per second"},
		{Key: "demo.items", Default: 50, Help: "demo workload: number of items"},
	}
}

// Validate checks the demo's settings and names every bad key.
func (c *Settings) Validate(_ *config.Config, bad config.Bad) {
	if c.Rate < 1 {
		bad("demo.rate", "got %d; want at least 1", c.Rate)
	}
	if c.Items < 1 {
		bad("demo.items", "got %d; want at least 1", c.Items)
	}
}
