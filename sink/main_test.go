package sink_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tallypipeline/tally/devstack/chembed"
	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The test binary's embedded ClickHouse engine, whose pipeline user may read filesDir (where the
// ClickHouse test writes sink files), and the sink command built for the crash test. Each test
// starts its own Kafka broker, so their topics do not mix.
// testPassword is the test engine's administrator password.
const testPassword = "sink-test-admin"

var (
	clickhouse *chembed.Server
	filesDir   string
	binDir     string
	sinkBin    string
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tally-sink-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	filesDir, binDir = filepath.Join(dir, "files"), dir
	clickhouse, err = chembed.Start(chembed.Config{DataDir: filepath.Join(dir, "clickhouse"), Addr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Pipeline: chembed.User{Password: testPassword}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start clickhouse:", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = clickhouse.Close(ctx)
	}()
	if sinkBin, err = testinfra.Build(dir, "github.com/tallypipeline/tally/sink/cmd/sink"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startKafka starts a broker for one test.
func startKafka(t *testing.T) *kafkabroker.Broker {
	t.Helper()
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}
