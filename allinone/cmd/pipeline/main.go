// Command pipeline runs tally on one machine: `pipeline run` (the default) starts every
// component in one process on the embedded Kafka, ClickHouse and Redis; `pipeline infra` starts
// only the embedded infrastructure, for component processes to run against.
package main

import (
	"os"

	"github.com/tallypipeline/tally/allinone"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/lifecycle"
)

// procsPerCPU is pipeline's runtime.procs_per_cpu: the embedded ClickHouse's calls hold Go's
// scheduler slots, and with one per CPU a ready connection waits for one to free up (count reads'
// p99 27 against 15 ms at 4: docs/PERFORMANCE.md, "Reads against the floor"). The component
// binaries embed no engine: 1.
const procsPerCPU = 4

// memoryShare is the part of the container's memory limit that runtime.memory_limit auto gives
// Go's heap in pipeline: the embedded ClickHouse and Redis allocate outside it.
const memoryShare = 0.5

// commands are the modes, for --help.
const commands = `  pipeline run     every component and the embedded Kafka, ClickHouse and Redis (the default)
  pipeline infra   the embedded Kafka, ClickHouse and Redis only, for component processes
`

func main() {
	cmd, args := "run", os.Args[1:]
	if len(args) > 0 && (args[0] == "run" || args[0] == "infra") {
		cmd, args = args[0], args[1:]
	}
	// Both modes read every section, so one config file and one flag set serve both.
	var settings allinone.Settings
	os.Exit(cli.Run(cli.Command{Name: "pipeline " + cmd, Args: args, Commands: commands, ProcsPerCPU: procsPerCPU, MemoryShare: memoryShare, Sections: settings.Sections(), Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		switch cmd {
		case "infra":
			return allinone.Infra(e, &settings.Embedded, os.Stdout), nil
		default:
			return allinone.AllInOne(e, &settings, os.Stdout), nil
		}
	}}))
}
