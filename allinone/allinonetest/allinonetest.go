// Package allinonetest starts the whole all-in-one pipeline inside a test process, on free
// loopback ports and a temporary data directory, and stops it when the test ends. chDB allows
// one engine per process, so a test binary can run one at a time.
package allinonetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tallypipeline/tally/allinone"
	"github.com/tallypipeline/tally/collector/read"
	"github.com/tallypipeline/tally/platform/buildinfo"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Running is a started all-in-one.
type Running struct {
	Config   *config.Config // with the embedded addresses filled in
	Settings *allinone.Settings
	API      string // collector base URL
	cancel   context.CancelFunc
	done     chan error
}

// Start runs the all-in-one with flags added to the test defaults (free ports, a temporary data
// directory, no demo unless flags enable it) and waits until it is ready. Stop is registered as
// a cleanup; call it earlier to check the shutdown.
func Start(t testing.TB, flags ...string) *Running {
	t.Helper()
	var addrs [3]string
	for i := range addrs {
		a, err := testinfra.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = a
	}
	args := append([]string{
		"--data_dir", t.TempDir(), "--demo.enabled=false",
		"--embedded.kafka_addr", addrs[0], "--embedded.clickhouse_addr", addrs[1], "--collector.addr", addrs[2],
		"--aggregator.flush_interval", "100ms", "--kafka.partitions", "4",
	}, flags...)
	var settings allinone.Settings
	cfg, err := config.Load("test", args, settings.Sections()...)
	if err != nil {
		t.Fatal(err)
	}
	// Warnings and errors are kept and shown if the test fails: a flaky failure in CI is
	// otherwise a status code with no cause.
	logs := &warnLog{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runner := lifecycle.NewRunner(logger)
	env := cli.Env{Config: &cfg, Logger: logger, Registry: cli.NewRegistry(buildinfo.Read()), Runner: runner, Now: time.Now}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{Config: &cfg, Settings: &settings, API: "http://" + addrs[2], cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- runner.Run(ctx, 20*time.Second, allinone.AllInOne(env, &settings, io.Discard)...) }()
	t.Cleanup(func() {
		_ = r.Stop()
		if t.Failed() {
			t.Logf("the all-in-one's warnings and errors:\n%s", logs.String())
		}
	})
	testinfra.WaitHTTP(t, 60*time.Second, r.API+"/readyz")
	return r
}

// WaitViewTotals waits until the aggregator has marked the view totals in Redis whole: until
// then (its first check slot, half a sketch interval after start) the collector reads counts
// from ClickHouse, one engine shared with the flushes, within a bound that a slow host may
// exceed. Tests of the steady state's reads wait for it.
func (r *Running) WaitViewTotals(t testing.TB) {
	t.Helper()
	rdb, err := redisclient.New(r.Config.Redis.Options())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	tot := totals.New(rdb, read.TotalsName)
	testinfra.WaitFor(t, 30*time.Second, "view totals in redis marked ready", func() (bool, string) {
		ready, err := tot.Ready(context.Background())
		return ready, fmt.Sprintf("ready %v, err %v", ready, err)
	})
}

// Stop shuts the pipeline down and returns the shutdown's error; later calls return nil.
func (r *Running) Stop() error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		return context.DeadlineExceeded
	}
}

// warnLog keeps the last maxWarnLog bytes of the all-in-one's warnings; the handler writes one
// record a call, from any goroutine.
type warnLog struct {
	mu  sync.Mutex
	buf []byte
}

const maxWarnLog = 64 << 10

func (w *warnLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - maxWarnLog; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *warnLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
