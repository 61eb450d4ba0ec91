// Package loadgen is the body of the `load` command: a load generator that drives an
// already-running collector over its public HTTP API (loopback only) and reports throughput and
// latency percentiles.
//
// Scenarios run alone or together (--scenario views+reads):
//   - views: NDJSON batches to POST /v1/events at a target event rate with one hot item, while
//     the aggregator group's consumer lag is sampled every second (Kafka admin API) and marker
//     views are probed for visibility through GET /v1/items/{id}/counts;
//   - clicks: the same for clicks (one hot ad), the click group's lag on topic clicks, and
//     marker clicks probed through the minute series GET /v1/ads/{id}/clicks;
//   - view-counts: edge servers' view counts (view_count lines, each carrying --count-views
//     views) on the views path, watched like views;
//   - reads: GET /v1/counts with a feed page, open loop: the hot item and ids drawn uniformly
//     from a catalog of --catalog items;
//   - likes: like/unlike on one hot item and GET /v1/users/{id}/likes, open loop;
//   - counters: batches of adds to POST /v1/namespaces/{ns}/adds (a namespace of
//     --counter-mode named by the run id, one hot counter), the counters stream's lag on
//     counter_events, probes added and read back, and optionally reads of 100 counters per
//     GET /v1/namespaces/{ns}/counters, open loop.
//
// Open-loop streams fire on a fixed schedule and measure latency from the scheduled time, so a
// server that stalls cannot hide its stall by slowing the generator (coordinated omission).
//
// Lifecycle and concurrency: Run owns every goroutine it starts (posters, open-loop workers,
// the lag sampler, probes, the progress printer) and returns only after all have ended. A run is
// bounded in time (--duration, plus at most the request timeout, the probe timeout and the
// drain wait) and in requests (rate x duration); it stops by itself, or early when ctx ends.
// Request bodies and URLs are built before the clock starts, so the generator spends its CPU
// on sending, which matters on a small machine shared with the server under test.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/client"
	"github.com/tallypipeline/tally/platform/progress"
)

// Report is the outcome of one run.
type Report struct {
	Scenario  string    `json:"scenario"`
	URL       string    `json:"url"`
	RunID     string    `json:"run_id"`
	Started   time.Time `json:"started"`
	DurationS float64   `json:"duration_s"`
	ElapsedS  float64   `json:"elapsed_s"` // until every stream, probe and drain ended
	// CPU seconds this process used: on a shared machine, the share the server did not get
	// (in tests, where the pipeline runs in the same process, it is everything).
	GeneratorCPU float64 `json:"generator_cpu_s"`
	// ServerCPU is the CPU seconds the server at URL used from just before the load to the end
	// of the drain (its /metrics' process_cpu_seconds_total; 0 when it does not expose it), and
	// ServerCPUPerEventUs that over the events accepted by every write stream (views, clicks,
	// view counts, counter adds, like changes), or over the reads served when nothing wrote.
	ServerCPU           float64       `json:"server_cpu_s,omitempty"`
	ServerCPUPerEventUs float64       `json:"server_cpu_us_per_event,omitempty"`
	Views               *ViewsReport  `json:"views,omitempty"`
	Clicks              *ViewsReport  `json:"clicks,omitempty"`
	ViewCounts          *ViewsReport  `json:"view_counts,omitempty"`
	Reads               *StreamReport `json:"reads,omitempty"`
	Likes               *LikesReport  `json:"likes,omitempty"`
	Counters            *ViewsReport  `json:"counters,omitempty"`
	CounterReads        *StreamReport `json:"counter_reads,omitempty"`
	Errors              int           `json:"errors"` // every unexpected outcome of every stream
}

// LikesReport is what the likes scenario measured.
type LikesReport struct {
	Changes       StreamReport  `json:"changes"`
	LikedBy       *StreamReport `json:"liked_by,omitempty"`
	NegativeLikes int64         `json:"negative_likes"` // answers whose "likes" was below zero (or absent)
}

// Main runs `load` with args (without the subcommand) and returns the exit code:
// 0 clean run, 1 the run failed or saw errors, 2 bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	c, err := ParseArgs(args, stdout)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !c.ProgressForced && !progress.Interactive(stderr) {
		c.Progress = 0 // quiet under cron and in pipes
	}
	rep, err := Run(ctx, c, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 1
	}
	text := stdout
	if c.JSON == "-" {
		text = stderr
	}
	WriteText(text, rep)
	if c.JSON != "" {
		if err := writeJSON(c.JSON, stdout, rep); err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
	}
	if rep.Errors > 0 {
		return 1
	}
	return 0
}

func writeJSON(dest string, stdout io.Writer, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	b = append(b, '\n')
	if dest == "-" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(dest, b, 0o644); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

// Run drives the collector at c.URL as c says and returns the report. progress receives a
// status line every c.Progress. It returns an error only when the run could not start; what
// went wrong during the run is counted in the report.
func Run(ctx context.Context, c Config, progress io.Writer) (*Report, error) {
	c.Warmup = min(c.Warmup, c.Duration/3)
	prefix := c.RunID
	if prefix == "" {
		prefix = "load-" + strconv.FormatUint(rand.Uint64()&0xffffffff, 36)
	}
	api, web, err := newClient(c.URL, c.APIKey, c.Timeout, c.Concurrency+3*c.MaxInflight+64)
	if err != nil {
		return nil, err
	}
	defer web.CloseIdleConnections()
	// A collector that is not serving would make the report measure the outage.
	if err := api.Ready(ctx); err != nil {
		return nil, fmt.Errorf("collector at %s is not ready: %w", c.URL, err)
	}
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))

	var views, clicks, counts, ctrs *viewsRun
	var reads, ctrReads *openLoop
	var likes *likesStreams
	if c.Scenarios.Views {
		views = newViewsRun(ctx, c, viewsStream(c), api, web, prefix)
	}
	if c.Scenarios.Clicks {
		clicks = newViewsRun(ctx, c, clicksStream(c), api, web, prefix)
	}
	if c.Scenarios.ViewCounts {
		counts = newViewsRun(ctx, c, viewCountsStream(c), api, web, prefix)
	}
	if c.Scenarios.Reads {
		reads = readsStream(c, api, prefix)
	}
	if c.Scenarios.Likes {
		likes = newLikesStreams(c, api, prefix, rng)
	}
	if c.Scenarios.Counters {
		ns := counterNamespace(prefix)
		if _, err := api.PutNamespace(ctx, ns, client.NamespaceSpec{Mode: client.CounterMode(c.CounterMode)}); err != nil {
			return nil, fmt.Errorf("create the counters namespace %s: %w", ns, err)
		}
		if c.CounterRate > 0 {
			ctrs = newViewsRun(ctx, c, countersStream(c, prefix), api, web, prefix)
		}
		if c.CounterReadRate > 0 {
			ctrReads = counterReadsStream(c, api, prefix)
		}
	}

	rep := &Report{Scenario: c.Scenarios.String(), URL: c.URL, RunID: prefix, DurationS: c.Duration.Seconds()}
	server0, serverOK := serverCPU(ctx, web, c.URL)
	cpu0 := cpuTime()
	// A short lead lets every worker reach its first sleep before slot 0 is due.
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(c.Duration)
	rep.Started = start.UTC()
	var wg sync.WaitGroup
	if views != nil {
		wg.Go(func() { r := views.run(ctx, start, end, seed+1); rep.Views = &r })
	}
	if clicks != nil {
		wg.Go(func() { r := clicks.run(ctx, start, end, seed+5); rep.Clicks = &r })
	}
	if counts != nil {
		wg.Go(func() {
			r := counts.run(ctx, start, end, seed+6)
			r.ViewsPerRecord = c.CountViews
			rep.ViewCounts = &r
		})
	}
	if reads != nil {
		wg.Go(func() { r := reads.run(ctx, start, end, seed+2); rep.Reads = &r })
	}
	if ctrs != nil {
		wg.Go(func() { r := ctrs.run(ctx, start, end, seed+7); rep.Counters = &r })
	}
	if ctrReads != nil {
		wg.Go(func() { r := ctrReads.run(ctx, start, end, seed+8); rep.CounterReads = &r })
	}
	if likes != nil {
		lr := &LikesReport{}
		rep.Likes = lr
		wg.Go(func() { lr.Changes = likes.changes.run(ctx, start, end, seed+3) })
		if likes.likedBy != nil {
			wg.Go(func() { r := likes.likedBy.run(ctx, start, end, seed+4); lr.LikedBy = &r })
		}
	}
	done := make(chan struct{})
	var pw sync.WaitGroup
	if c.Progress > 0 {
		pw.Go(func() {
			printProgress(progress, c.Progress, start, end, done, []*viewsRun{views, clicks, counts, ctrs}, reads, likes)
		})
	}
	wg.Wait()
	close(done)
	pw.Wait()

	rep.ElapsedS = time.Since(start).Seconds()
	rep.GeneratorCPU = (cpuTime() - cpu0).Seconds()
	if server1, ok := serverCPU(ctx, web, c.URL); ok && serverOK {
		rep.ServerCPU = server1 - server0
		if n := rep.events(); n > 0 {
			rep.ServerCPUPerEventUs = rep.ServerCPU / float64(n) * 1e6
		}
	}
	if rep.Likes != nil {
		rep.Likes.NegativeLikes = likes.negative.Load()
	}
	rep.Errors = rep.errors()
	return rep, nil
}

// errors sums the errors of every stream of the report.
func (rep *Report) errors() int {
	var n int
	for _, r := range []*ViewsReport{rep.Views, rep.Clicks, rep.ViewCounts, rep.Counters} {
		if r != nil {
			n += r.Errors + r.Lag.Errors + r.Visibility.Errors
		}
	}
	for _, r := range []*StreamReport{rep.Reads, rep.CounterReads} {
		if r != nil {
			n += r.Errors
		}
	}
	if rep.Likes != nil {
		n += rep.Likes.Changes.Errors
		if rep.Likes.LikedBy != nil {
			n += rep.Likes.LikedBy.Errors
		}
	}
	return n
}

// events is what the server's CPU is divided by: the events every write stream had accepted,
// or, when nothing wrote, the reads answered.
func (r *Report) events() int64 {
	var n int64
	for _, v := range []*ViewsReport{r.Views, r.Clicks, r.ViewCounts, r.Counters} {
		if v != nil {
			n += v.AcceptedEvents
		}
	}
	if r.Likes != nil {
		n += r.Likes.Changes.OK
	}
	if n > 0 {
		return n
	}
	for _, s := range []*StreamReport{r.Reads, r.CounterReads} {
		if s != nil {
			n += s.OK
		}
	}
	return n
}

func printProgress(w io.Writer, every time.Duration, start, end time.Time, done <-chan struct{}, streams []*viewsRun, reads *openLoop, likes *likesStreams) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		el := min(time.Since(start), end.Sub(start))
		line := fmt.Sprintf("load: %5.0fs, %.0fs left", el.Seconds(), max(0, time.Until(end).Seconds()))
		for _, v := range streams {
			if v != nil {
				n := v.accepted.Load()
				line += fmt.Sprintf("  %s %d accepted (%.0f/s), 503s %d, lag %d", v.s.name, n, float64(n)/el.Seconds(), v.unavailable.Load(), v.lag.latest())
			}
		}
		if reads != nil {
			line += fmt.Sprintf("  reads %d", reads.fired.Load())
		}
		if likes != nil {
			line += fmt.Sprintf("  likes %d", likes.changes.fired.Load())
		}
		fmt.Fprintln(w, line)
	}
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
