package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// handoverBound is how long, with the default session timeout (10 s), the views a partition
// received may wait to be counted when a member dies, leaves or joins (docs/SCALING.md has the
// measured windows).
const handoverBound = 30 * time.Second

// Three aggregator processes share the views partitions with the default session timeout while
// views arrive steadily. One is SIGKILLed (its machine gone: it does not come back), a fourth
// joins, one is stopped with SIGTERM: after each, every partition's views up to that moment are
// counted within handoverBound, and the stopped member exits within its shutdown timeout. The
// test prints each window.
func TestAggregatorHandover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCluster(t, 3, "--aggregator.session_timeout", "10s")
	var posted atomic.Int64
	pctx, stopPosting := context.WithCancel(ctx)
	posting := make(chan error, 1)
	go func() { posting <- postEvents(pctx, c.api, 3000*600, pacing{perSecond: 3000}, &posted) }()
	defer func() { stopPosting(); <-posting }()

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := c.kc.client(logger)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	conn, err := chclient.Open(ctx, c.ch)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// counted waits until every views partition's deltas checkpoint reaches the log's end as it
	// is now, and returns how long that took.
	counted := func(what string) time.Duration {
		t.Helper()
		t0 := time.Now()
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicViews)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			t.Fatalf("%s: list the log's end offsets: %v", what, err)
		}
		testinfra.WaitForEvery(t, 2*time.Minute, 100*time.Millisecond, what+": every partition counted", func() (bool, string) {
			got, err := partitionOffsets(ctx, conn, "SELECT partition, max(end_offset) FROM view_deltas WHERE item_id = '' GROUP BY partition")
			if err != nil {
				return false, err.Error()
			}
			behind := ""
			ends.Each(func(o kadm.ListedOffset) {
				if got[o.Partition] < o.Offset {
					behind = fmt.Sprintf("partition %d at %d of %d", o.Partition, got[o.Partition], o.Offset)
				}
			})
			return behind == "", behind
		})
		return time.Since(t0)
	}

	// watch measures counted again and again for d after an event, so that a rebalance that
	// starts late is inside a measured window; it says the longest.
	watch := func(what string, d time.Duration) {
		t.Helper()
		var worst time.Duration
		for t0 := time.Now(); time.Since(t0) < d; {
			worst = max(worst, counted(what))
		}
		t.Logf("%s: the views of every partition were counted within %s at worst (%d views posted so far)", what, worst.Round(10*time.Millisecond), posted.Load())
		if worst > handoverBound {
			t.Errorf("%s: got %s to count every partition; want within %s", what, worst.Round(10*time.Millisecond), handoverBound)
		}
	}

	counted("the group forms") // and catches up
	watch("steady state, three members", 3*time.Second)
	_ = c.aggs[0].stop(syscall.SIGKILL, 10*time.Second)
	watch("a member SIGKILLed", 13*time.Second)
	c.addAggregator(t)
	watch("a fourth member joined", 6*time.Second)
	_ = c.aggs[3].stop(syscall.SIGKILL, 10*time.Second)
	c.addAggregator(t)
	watch("the new member SIGKILLed and another one joined", 13*time.Second)

	t0 := time.Now()
	if err := c.aggs[1].stop(syscall.SIGTERM, 25*time.Second); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	t.Logf("a member stopped with SIGTERM exited in %s", time.Since(t0).Round(10*time.Millisecond))
	// The stop is cut at shutdown.timeout (20 s); a second more is the process's exit.
	if d := time.Since(t0); d > 21*time.Second {
		t.Errorf("SIGTERM: got an exit after %s; want within shutdown.timeout (20 s)", d.Round(10*time.Millisecond))
	}
	watch("a member stopped with SIGTERM", 6*time.Second)
	select {
	case err := <-posting:
		t.Fatalf("posting ended early: %v", err)
	default:
	}
}
