// Command load drives a running collector over HTTP (loopback only) and reports throughput and
// latency percentiles; see `load --help` and docs/PERFORMANCE.md. It is its own binary so that it
// does not link the embedded ClickHouse engine.
package main

import (
	"os"

	"github.com/tallypipeline/tally/loadgen"
)

func main() {
	os.Exit(loadgen.Main(os.Args[1:], os.Stdout, os.Stderr))
}
