package migrate

import (
	"os"
	"testing"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// infra is the shared test infrastructure; only its ClickHouse engine is used here.
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}
