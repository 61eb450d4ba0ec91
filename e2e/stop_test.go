package e2e_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestStoppingAggregatorKeepsToItsTimeout sends SIGTERM to an aggregator while the group
// rebalances (a third member just joined) and while ClickHouse cannot answer (the
// infrastructure process is stopped), so its last flush cannot finish: it must exit within its
// shutdown.timeout, saying what it left behind, and the other members must count every view
// exactly once all the same.
func TestStoppingAggregatorKeepsToItsTimeout(t *testing.T) {
	const timeout = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startCluster(t, 2, "--shutdown.timeout", timeout.String())
	var posted atomic.Int64
	postDone := make(chan error, 1)
	n := eoEvents / 16
	go func() { postDone <- postEvents(ctx, c.api, n, pacing{perSecond: 4_000}, &posted) }()
	testinfra.WaitFor(t, time.Minute, "views posted", func() (bool, string) { return posted.Load() > int64(n/4), "" })

	c.addAggregator(t)
	time.Sleep(200 * time.Millisecond) // the group is rebalancing
	c.infra.signal(syscall.SIGSTOP)
	stopping := c.aggs[0]
	t0 := time.Now()
	stopping.signal(syscall.SIGTERM)
	select {
	case <-stopping.done:
	case <-time.After(timeout + 10*time.Second):
		c.infra.signal(syscall.SIGCONT)
		t.Fatalf("%s still running %s after SIGTERM; want it gone within its %s shutdown timeout", stopping.name, time.Since(t0), timeout)
	}
	took := time.Since(t0)
	c.infra.signal(syscall.SIGCONT)
	if took > timeout+2*time.Second {
		t.Errorf("%s exited %s after SIGTERM; want within its %s shutdown timeout (+2 s)", stopping.name, took, timeout)
	}
	log, _ := os.ReadFile(stopping.log)
	if !strings.Contains(string(log), "shutdown complete") {
		t.Errorf("%s's log says no \"shutdown complete\":\n%s", stopping.name, testinfra.LogTail(stopping.log, 3000))
	}
	t.Logf("%s exited %s after SIGTERM with ClickHouse stopped", stopping.name, took.Round(time.Millisecond))
	if err := <-postDone; err != nil {
		t.Fatal(err)
	}
	verifyExact(t, ctx, c.kc, c.ch, c.api)
}
