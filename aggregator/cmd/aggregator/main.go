// Command aggregator consumes the event topics and writes exact, deduplicated totals to
// ClickHouse.
package main

import (
	"os"

	"tally/aggregator"
	"tally/aggregator/aggregatorconf"
	"tally/platform/cli"
	"tally/platform/config"
	"tally/platform/lifecycle"
	"tally/schemas/clickconf"
)

func main() {
	var settings aggregatorconf.Settings
	// The click-id keys are the clicks section's other part: the aggregator reads none of them,
	// but loads them so that a file's clicks section is checked whole (config.Section).
	var clickIDs clickconf.ClickIDs
	os.Exit(cli.Run(cli.Command{Name: "aggregator", Args: os.Args[1:], Needs: config.Servers{Kafka: true, ClickHouse: true, Redis: true}, Sections: append(settings.Sections(), &clickIDs), Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		return aggregator.Parts(e, &settings, lifecycle.OwnAdmin), nil
	}}))
}
