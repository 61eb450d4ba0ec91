// Command aggregator consumes the event topics and writes exact, deduplicated totals to
// ClickHouse.
package main

import (
	"os"

	"tally/aggregator"
	"tally/platform/cli"
	"tally/platform/config"
	"tally/platform/lifecycle"
)

func main() {
	var settings aggregator.Settings
	os.Exit(cli.Run(cli.Command{Name: "aggregator", Args: os.Args[1:], Standalone: true, Sections: []config.Section{&settings}, Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		return aggregator.Parts(e, &settings, lifecycle.OwnAdmin), nil
	}}))
}
