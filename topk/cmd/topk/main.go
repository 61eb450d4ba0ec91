// Command topk ranks the hottest items and ads per window (1m and 1h exact, 24h within a stated
// bound) from the aggregators' deduplicated counts, and publishes the lists every few seconds.
package main

import (
	"os"

	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/topk"
)

func main() {
	var settings topk.Settings
	os.Exit(cli.Run(cli.Command{Name: "topk", Args: os.Args[1:], Needs: config.Servers{Kafka: true, ClickHouse: true, Redis: true}, Sections: []config.Section{&settings}, Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		return topk.Parts(e, &settings, lifecycle.OwnAdmin), nil
	}}))
}
