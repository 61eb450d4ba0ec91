package loadgen

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample is every percentile", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..100 is 50", hundred, 50, 50 * time.Millisecond},
		{"p90 of 1..100 is 90", hundred, 90, 90 * time.Millisecond},
		{"p99 of 1..100 is 99", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"nearest rank rounds up", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 10 samples is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"tiny p is the min", ms(3, 5, 9), 0.1, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	samples := []time.Duration{5 * time.Millisecond, 1 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	got := summarize(samples)
	want := Summary{Count: 5, P50: 3, P90: 5, P99: 5, Max: 5, Mean: 3}
	if got != want {
		t.Errorf("got %+v; want %+v", got, want)
	}
	if got := summarize(nil); got != (Summary{}) {
		t.Errorf("empty: got %+v; want zero", got)
	}
}

func TestRecorderConcurrent(t *testing.T) {
	var r recorder
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 1000 {
				r.add(time.Duration(g*1000+i+1) * time.Microsecond)
			}
		}()
	}
	for range 8 {
		<-done
	}
	s := r.summary()
	if s.Count != 8000 || s.Max != 8 {
		t.Errorf("got count %d max %v ms; want 8000 and 8", s.Count, s.Max)
	}
}

func TestMedianAndSlope(t *testing.T) {
	medians := []struct {
		name string
		vs   []int64
		want float64
	}{
		{"empty", nil, 0},
		{"odd", []int64{9, 1, 5}, 5},
		{"even averages the middle two", []int64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range medians {
		t.Run("median "+tt.name, func(t *testing.T) {
			if got := median(tt.vs); got != tt.want {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
	slopes := []struct {
		name   string
		xs, ys []float64
		want   float64
	}{
		{"flat", []float64{1, 2, 3}, []float64{5, 5, 5}, 0},
		{"rising 1000 per x", []float64{0, 1, 2, 3}, []float64{10, 1010, 2010, 3010}, 1000},
		{"one point", []float64{1}, []float64{3}, 0},
		{"same x", []float64{2, 2}, []float64{1, 9}, 0},
	}
	for _, tt := range slopes {
		t.Run("slope "+tt.name, func(t *testing.T) {
			if got := slope(tt.xs, tt.ys); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}
