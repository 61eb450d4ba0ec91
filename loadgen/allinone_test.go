package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/allinone/allinonetest"
	"github.com/tallypipeline/tally/loadgen"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestLoadAgainstAllInOne runs short views+reads and likes scenarios against the whole pipeline
// started in this process (its own test binary: chDB allows one engine per process) and checks
// that the reports measured what they claim with no errors.
func TestLoadAgainstAllInOne(t *testing.T) {
	r := allinonetest.Start(t)
	api := r.API
	brokers := r.Config.Kafka.Brokers[0]
	// The embedded broker requires its SASL user; load reads it from the environment.
	sasl := r.Config.Kafka.SASL
	t.Setenv("TALLY_KAFKA_SASL_MECHANISM", sasl.Mechanism)
	t.Setenv("TALLY_KAFKA_SASL_USERNAME", sasl.Username)
	t.Setenv("TALLY_KAFKA_SASL_PASSWORD", sasl.Password)
	ctx := context.Background()
	// Likes answer 503 until the applier has marked Redis as built from the log.
	testinfra.WaitHTTP(t, 30*time.Second, api+"/v1/users/u1/likes?ids=a")
	// Counts answer from Redis once the view totals are marked whole; this test measures that.
	r.WaitViewTotals(t)

	t.Run("views+reads", func(t *testing.T) {
		rep := runLoad(t, ctx, "--url", api, "--brokers", brokers, "--scenario", "views+reads",
			"--duration", "3s", "--rate", "2000", "--batch", "100", "--concurrency", "2", "--items", "50",
			"--read-rate", "50", "--warmup", "1s", "--probe-every", "300ms", "--probe-poll", "50ms",
			"--probe-timeout", "20s", "--drain", "20s")
		v := rep.Views
		if v == nil || rep.Reads == nil {
			t.Fatalf("got report %+v; want views and reads sections", rep)
		}
		if v.AcceptedEvents <= 0 || v.Requests <= 0 {
			t.Errorf("got %d accepted events in %d requests; want some", v.AcceptedEvents, v.Requests)
		}
		if v.Latency.Count != int(v.Requests) {
			t.Errorf("got %d latency samples; want one per request (%d)", v.Latency.Count, v.Requests)
		}
		if v.Visibility.Visible == 0 || v.Visibility.Latency.Count == 0 || v.Visibility.NotVisible != 0 {
			t.Errorf("got visibility %+v; want every probe measured visible", v.Visibility)
		}
		// Probes go every 300 ms from the start: the first ones are the warm-up's.
		if n, all := v.Visibility.AfterWarmup.Count, v.Visibility.Latency.Count; n == 0 || n >= all || v.Visibility.WarmupS != 1 {
			t.Errorf("got %d of %d probes after a warm-up of %gs; want some but not all, after 1s", n, all, v.Visibility.WarmupS)
		}
		if len(v.Lag.Samples) == 0 || !v.Lag.Drained {
			t.Errorf("got lag %+v; want samples and a drained lag", v.Lag)
		}
		if r := rep.Reads; r.OK == 0 || r.Latency["GET /v1/counts"].Count != int(r.Requests) {
			t.Errorf("got reads %+v; want requests, each measured", r)
		}
		if rep.Errors != 0 || v.Status503 != 0 {
			t.Errorf("got %d errors, %d 503s; want none", rep.Errors, v.Status503)
		}
		// The server is this test process: its CPU over the run, per view accepted.
		if want := rep.ServerCPU / float64(v.AcceptedEvents) * 1e6; rep.ServerCPU <= 0 || rep.ServerCPUPerEventUs != want {
			t.Errorf("got server CPU %g s, %g us per event; want some, over the %d views (%g)", rep.ServerCPU, rep.ServerCPUPerEventUs, v.AcceptedEvents, want)
		}
	})
	t.Run("clicks", func(t *testing.T) {
		rep := runLoad(t, ctx, "--url", api, "--brokers", brokers, "--scenario", "clicks",
			"--duration", "3s", "--click-rate", "2000", "--click-batch", "100", "--click-concurrency", "2", "--items", "50",
			"--warmup", "1s", "--probe-every", "300ms", "--probe-poll", "50ms", "--probe-timeout", "20s", "--drain", "20s")
		c := rep.Clicks
		if c == nil {
			t.Fatalf("got report %+v; want a clicks section", rep)
		}
		if c.AcceptedEvents <= 0 || c.Latency.Count != int(c.Requests) {
			t.Errorf("got %d accepted clicks, %d latency samples for %d requests; want some, one per request", c.AcceptedEvents, c.Latency.Count, c.Requests)
		}
		if c.Visibility.Visible == 0 || c.Visibility.NotVisible != 0 {
			t.Errorf("got visibility %+v; want every probe click measured visible in its minute", c.Visibility)
		}
		if len(c.Lag.Samples) == 0 || !c.Lag.Drained || c.Lag.Group != "tally-aggregator-clicks" {
			t.Errorf("got lag %+v; want samples of the clicks group and a drained lag", c.Lag)
		}
		if rep.Errors != 0 || c.Status503 != 0 {
			t.Errorf("got %d errors, %d 503s; want none", rep.Errors, c.Status503)
		}
	})
	t.Run("counters", func(t *testing.T) {
		// An accurate read fetches the partitions' tails and queries the one engine, which runs a
		// query at a time: under -race a few a second are what one collector answers in time.
		for mode, reads := range map[string]string{"best_effort": "20", "accurate": "2"} {
			rep := runLoad(t, ctx, "--url", api, "--brokers", brokers, "--scenario", "counters", "--counter-mode", mode,
				"--duration", "3s", "--counter-rate", "2000", "--counter-batch", "100", "--counter-concurrency", "2", "--counter-names", "50",
				"--counter-read-rate", reads, "--warmup", "1s", "--probe-every", "500ms", "--probe-poll", "100ms", "--probe-timeout", "20s", "--drain", "20s")
			c := rep.Counters
			if c == nil || rep.CounterReads == nil {
				t.Fatalf("%s: got report %+v; want counters and counter reads sections", mode, rep)
			}
			if c.AcceptedEvents <= 0 || c.Latency.Count != int(c.Requests) {
				t.Errorf("%s: got %d accepted adds, %d latency samples for %d requests; want some, one per request", mode, c.AcceptedEvents, c.Latency.Count, c.Requests)
			}
			if c.Visibility.Visible == 0 || c.Visibility.NotVisible != 0 {
				t.Errorf("%s: got visibility %+v; want every probe add read back", mode, c.Visibility)
			}
			if len(c.Lag.Samples) == 0 || !c.Lag.Drained || c.Lag.Group != "tally-aggregator-counters" {
				t.Errorf("%s: got lag %+v; want samples of the counters group and a drained lag", mode, c.Lag)
			}
			if rep.CounterReads.OK == 0 || rep.Errors != 0 || c.Status503 != 0 {
				// A read may be refused over capacity (503, retry) on a busy host; an add may not.
				t.Errorf("%s: got %d reads (%d more answered 503), %d errors, %d adds answered 503; want reads, no errors, no add refused",
					mode, rep.CounterReads.OK, rep.CounterReads.Status503, rep.Errors, c.Status503)
			}
		}
	})
	t.Run("likes", func(t *testing.T) {
		rep := runLoad(t, ctx, "--url", api, "--scenario", "likes", "--duration", "2s",
			"--like-rate", "200", "--users", "50", "--liked-by-rate", "50")
		l := rep.Likes
		if l == nil || l.LikedBy == nil {
			t.Fatalf("got report %+v; want likes and liked-by sections", rep)
		}
		if l.Changes.OK == 0 || l.LikedBy.OK == 0 {
			t.Errorf("got %d changes, %d liked-by answered; want some of each", l.Changes.OK, l.LikedBy.OK)
		}
		if rep.Errors != 0 || l.NegativeLikes != 0 {
			t.Errorf("got %d errors, %d negative totals; want none", rep.Errors, l.NegativeLikes)
		}
	})

	if err := r.Stop(); err != nil {
		t.Errorf("shutdown: got %v; want a clean stop", err)
	}
}

// runLoad runs one load with args, bounded so a stuck run fails the test instead of hanging
// it, checks that the text and JSON forms of the report agree, and returns the report.
func runLoad(t *testing.T, ctx context.Context, args ...string) *loadgen.Report {
	t.Helper()
	c, err := loadgen.ParseArgs(append(args, "--progress", "0"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep *loadgen.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := loadgen.Run(ctx, c, io.Discard)
		done <- result{rep, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("load run did not end within 90s")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	var text bytes.Buffer
	loadgen.WriteText(&text, res.rep)
	t.Log("\n" + text.String())
	if !strings.Contains(text.String(), "p99") {
		t.Errorf("text report: got %q; want percentiles", text.String())
	}
	b, err := json.Marshal(res.rep)
	if err != nil {
		t.Fatal(err)
	}
	var back loadgen.Report
	if err := json.Unmarshal(b, &back); err != nil || back.Errors != res.rep.Errors || back.Scenario != res.rep.Scenario {
		t.Errorf("JSON report round trip: got %+v, %v; want the same report", back, err)
	}
	return res.rep
}
