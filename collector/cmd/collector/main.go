// Command collector serves the HTTP API: events in (to Kafka), counts out.
package main

import (
	"os"
	"time"

	"tally/collector"
	"tally/platform/cli"
	"tally/platform/lifecycle"
)

func main() {
	os.Exit(cli.Run("collector", os.Args[1:], true, func(e cli.Env) ([]lifecycle.Part, error) {
		parts, _ := collector.Parts(e.Config, e.Runner, e.Logger, e.Registry, time.Now)
		return parts, nil
	}))
}
