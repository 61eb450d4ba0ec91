// Command aggregator consumes the event topics and writes exact, deduplicated totals to
// ClickHouse.
package main

import (
	"os"
	"time"

	"tally/aggregator"
	"tally/platform/cli"
	"tally/platform/config"
	"tally/platform/lifecycle"
)

func main() {
	var settings aggregator.Settings
	os.Exit(cli.Run("aggregator", os.Args[1:], true, []config.Section{&settings}, func(e cli.Env) ([]lifecycle.Part, error) {
		return aggregator.Parts(e.Config, &settings, e.Runner, e.Logger, e.Registry, time.Now, true), nil
	}))
}
