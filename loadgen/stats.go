package loadgen

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Summary is the distribution of one set of latencies, in milliseconds for the JSON report.
type Summary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted: the smallest value
// at least p% of the samples are at or below. Nearest rank never reports a value that was not
// measured, and p100 is the maximum. Zero when there are no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize sorts samples in place and returns their summary.
func summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return Summary{
		Count: len(samples),
		P50:   ms(percentile(samples, 50)),
		P90:   ms(percentile(samples, 90)),
		P99:   ms(percentile(samples, 99)),
		Max:   ms(samples[len(samples)-1]),
		Mean:  ms(sum / time.Duration(len(samples))),
	}
}

// recorder collects latencies from many goroutines. Every sample is kept (a 60 s run at
// 5,000 requests/s is 300k samples, 2.4 MB), so percentiles are exact rather than bucketed.
type recorder struct {
	mu      sync.Mutex
	samples []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	r.mu.Unlock()
}

// summary summarizes what was recorded; call it once the writers are done.
func (r *recorder) summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(r.samples)
}

// median of vs (sorted in place); zero when empty.
func median(vs []int64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return float64(vs[n/2])
	}
	return float64(vs[n/2-1]+vs[n/2]) / 2
}

// slope is the least-squares slope of ys over xs (units of y per unit of x); zero with fewer
// than two distinct xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}
