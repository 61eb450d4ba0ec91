package sink_test

import (
	"os"
	"testing"

	"tally/platform/testinfra"
)

// infra is the test binary's Kafka broker and ClickHouse engine; sinkBin the sink command built
// for the crash test.
var (
	infra   *testinfra.Infra
	sinkBin string
)

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error {
		infra = in
		var err error
		sinkBin, err = testinfra.Build(in.Dir, "tally/sink/cmd/sink")
		return err
	}))
}
