package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// fmtSummary is one line of percentiles.
func fmtSummary(s Summary) string {
	if s.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s ms  (n=%d)", fmtMs(s.P50), fmtMs(s.P90), fmtMs(s.P99), fmtMs(s.Max), s.Count)
}

func fmtMs(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// WriteText writes the human-readable report.
func WriteText(w io.Writer, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("load: %s against %s, run %s, %.0fs of load (%.1fs with drain and probes); the generator used %.1f CPU s",
		r.Scenario, r.URL, r.RunID, r.DurationS, r.ElapsedS, r.GeneratorCPU)
	if r.ServerCPU > 0 {
		p("server      %.1f CPU s over the load and the drain, %.2f CPU-us per accepted event (process_cpu_seconds_total at %s/metrics: the all-in-one without its redis-server, or that collector alone)",
			r.ServerCPU, r.ServerCPUPerEventUs, r.URL)
	}
	var samples []string
	for _, st := range []struct {
		name, unit, path, metrics string
		v                         *ViewsReport
	}{{"views", "events", "GET /v1/items/{probe}/counts", "views", r.Views}, {"clicks", "clicks", "GET /v1/ads/{probe}/clicks (minute series)", "clicks", r.Clicks},
		{"view-counts", "records", "GET /v1/items/{probe}/counts", "views", r.ViewCounts},
		{"counters", "adds", "GET /v1/namespaces/{ns}/counters/{probe}", "counters", r.Counters}} {
		v := st.v
		if v == nil {
			continue
		}
		p("%s: target %d %s/s, batches of %d lines from %d posters, hot share %.0f%%", st.name, v.TargetRate, st.unit, v.Batch, v.Concurrency, v.HotShare*100)
		p("  accepted    %d %s = %.0f/s (%.0f%% of target); %d requests, %d answered 503, %d errors",
			v.AcceptedEvents, st.unit, v.EventsPerSec, 100*v.EventsPerSec/float64(v.TargetRate), v.Requests, v.Status503, v.Errors)
		if v.ViewsPerRecord > 0 {
			p("  carried     %d views per record = %.0f views/s", v.ViewsPerRecord, v.EventsPerSec*float64(v.ViewsPerRecord))
		}
		p("  request     %s", fmtSummary(v.Latency))
		if v.ConsumedPerSec > 0 {
			p("  aggregator  consumed %.0f records/s during the load, flush mean %.0f ms (tally_%s_* at /metrics)", v.ConsumedPerSec, v.FlushMeanMs, st.metrics)
		}
		l := v.Lag
		verdict := "not growing"
		if l.Growing {
			verdict = "GROWING"
		}
		missed := ""
		if l.Missed > 0 {
			missed = fmt.Sprintf(" (%d missed: the broker answered too late)", l.Missed)
		}
		p("  lag         group %s, %d samples%s: median %.0f in [%.0fs,%.0fs), %.0f from %.0fs; slope %+.0f records/s; %s; %.1fs of input behind at the end",
			l.Group, len(l.Samples), missed, l.FirstMedian, l.FirstFrom, l.FirstFrom+l.Window, l.LastMedian, l.LastFrom, l.SlopePerSec, verdict, l.BehindS)
		switch {
		case l.Drained:
			p("              drained to 0 in %.1fs after the load", l.DrainSeconds)
		case l.DrainError != "":
			p("              %s", l.DrainError)
		}
		vis := v.Visibility
		p("  visibility  accepted -> %s shows it (poll %.0f ms): %s", st.path, vis.PollMs, fmtSummary(vis.Latency))
		if vis.WarmupS > 0 {
			p("              posted after %.0fs warm-up: %s", vis.WarmupS, fmtSummary(vis.AfterWarmup))
		}
		p("              %d probes, %d visible, %d not visible in time, %d errors", vis.Probes, vis.Visible, vis.NotVisible, vis.Errors)
		samples = append(samples, v.ErrorSamples...)
		samples = append(samples, l.ErrorSamples...)
		samples = append(samples, vis.ErrorSamples...)
	}
	if s := r.Reads; s != nil {
		writeStream(p, "reads", s)
		samples = append(samples, s.ErrorSamples...)
	}
	if s := r.CounterReads; s != nil {
		writeStream(p, "counter reads", s)
		samples = append(samples, s.ErrorSamples...)
	}
	if l := r.Likes; l != nil {
		writeStream(p, "likes", &l.Changes)
		p("  totals      %d answers with likes < 0", l.NegativeLikes)
		samples = append(samples, l.Changes.ErrorSamples...)
		if l.LikedBy != nil {
			writeStream(p, "liked-by", l.LikedBy)
			samples = append(samples, l.LikedBy.ErrorSamples...)
		}
	}
	p("errors: %d", r.Errors)
	for _, s := range samples {
		p("  %s", s)
	}
}

func writeStream(p func(string, ...any), name string, s *StreamReport) {
	p("%s: target %.0f requests/s open loop: %d sent (%.0f/s), %d unsent, %d ok, %d answered 503, %d errors",
		name, s.TargetRate, s.Requests, s.AchievedRate, s.Unsent, s.OK, s.Status503, s.Errors)
	kinds := make([]string, 0, len(s.Latency))
	for k := range s.Latency {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	width := 0
	for _, k := range kinds {
		width = max(width, len(k))
	}
	for _, k := range kinds {
		p("  %s%s  %s", k, strings.Repeat(" ", width-len(k)), fmtSummary(s.Latency[k]))
		if s.WarmupS > 0 {
			p("  %s%s  %s  after %.0fs warm-up", k, strings.Repeat(" ", width-len(k)), fmtSummary(s.AfterWarmup[k]), s.WarmupS)
		}
	}
	p("  %s%s  %s", "start delay", strings.Repeat(" ", max(0, width-len("start delay"))), fmtSummary(s.StartDelay))
}
