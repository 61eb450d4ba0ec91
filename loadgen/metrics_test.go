package loadgen

import (
	"math"
	"testing"
	"time"
)

func TestMetricSum(t *testing.T) {
	text := []byte(`# HELP tally_views_records_total View records consumed.
# TYPE tally_views_records_total counter
tally_views_records_total 12345
tally_views_records_total_extra 99
# TYPE tally_views_flush_seconds histogram
tally_views_flush_seconds_bucket{le="0.5"} 2
tally_views_flush_seconds_bucket{le="+Inf"} 3
tally_views_flush_seconds_sum 1.5
tally_views_flush_seconds_count 3
tally_ingest_events_total{result="accepted",type="view"} 100
tally_ingest_events_total{result="rejected",type="view"} 2 1700000000000
`)
	tests := []struct {
		name   string
		metric string
		want   float64
		wantOK bool
	}{
		{"plain counter, not its longer namesake", "tally_views_records_total", 12345, true},
		{"histogram sum", "tally_views_flush_seconds_sum", 1.5, true},
		{"histogram count", "tally_views_flush_seconds_count", 3, true},
		{"labels summed, timestamp ignored", "tally_ingest_events_total", 102, true},
		{"absent", "tally_nothing", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := metricSum(text, tt.metric)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got %v %v; want %v %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestJudgeLag(t *testing.T) {
	steady := func(n int, f func(s int) int64) []LagSample {
		out := make([]LagSample, n)
		for i := range out {
			out[i] = LagSample{T: float64(i + 1), Lag: f(i + 1)}
		}
		return out
	}
	tests := []struct {
		name        string
		samples     []LagSample
		elapsed     time.Duration
		rate        float64
		wantGrowing bool
		wantFirst   float64
		wantLast    float64
		wantBehind  float64
	}{
		{"flat lag keeps up", steady(60, func(int) int64 { return 50000 }), 60 * time.Second, 100000, false, 50000, 50000, 0.5},
		{"noise within a second of events", steady(60, func(s int) int64 { return 50000 + int64(s%3)*20000 }), 60 * time.Second, 100000, false, 70000, 70000, 0.7},
		{"falls behind 10k/s", steady(60, func(s int) int64 { return int64(s) * 10000 }), 60 * time.Second, 100000, true, 145000, 555000, 5.55},
		{"warm-up spike ignored", steady(60, func(s int) int64 {
			if s < 10 {
				return 900000
			}
			return 40000
		}), 60 * time.Second, 100000, false, 40000, 40000, 0.4},
		{"a backlog draining slowly is behind, not growing", steady(60, func(s int) int64 { return 700000 - int64(s)*2000 }), 60 * time.Second, 100000, false, 671000, 589000, 5.89},
		{"no samples", nil, 60 * time.Second, 100000, false, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := judgeLag(tt.samples, tt.elapsed, 10*time.Second, 10*time.Second, tt.rate)
			if r.Growing != tt.wantGrowing || r.FirstMedian != tt.wantFirst || r.LastMedian != tt.wantLast || math.Abs(r.BehindS-tt.wantBehind) > 1e-9 {
				t.Errorf("got growing %v first %v last %v behind %vs; want %v %v %v %vs", r.Growing, r.FirstMedian, r.LastMedian, r.BehindS, tt.wantGrowing, tt.wantFirst, tt.wantLast, tt.wantBehind)
			}
		})
	}
	t.Run("short run shrinks warm-up and windows", func(t *testing.T) {
		r := judgeLag(steady(3, func(int) int64 { return 5 }), 3*time.Second, 10*time.Second, 10*time.Second, 100)
		if r.FirstFrom != 1 || r.Window != 1 || r.LastFrom != 2 {
			t.Errorf("got first from %v window %v last from %v; want 1 1 2", r.FirstFrom, r.Window, r.LastFrom)
		}
	})
}
