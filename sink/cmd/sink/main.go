// Command sink keeps every raw event of the kept topics as hourly Parquet files, the audit trail
// and the nightly jobs' input (package sink).
package main

import (
	"os"

	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/sink"
	"github.com/tallypipeline/tally/sink/sinkconf"
)

func main() {
	var settings sinkconf.Settings
	os.Exit(cli.Run(cli.Command{Name: "sink", Args: os.Args[1:], Needs: config.Servers{Kafka: true}, Sections: []config.Section{&settings}, Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		return sink.Parts(e, &settings, lifecycle.OwnAdmin), nil
	}}))
}
