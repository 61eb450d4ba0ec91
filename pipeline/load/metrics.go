package load

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
)

// viewsMetrics are the aggregator's counters at one moment.
type viewsMetrics struct {
	ok                   bool
	records              float64 // tally_views_records_total
	flushSum, flushCount float64 // tally_views_flush_seconds
}

// scrapeViewsMetrics reads the aggregator's counters from the collector's /metrics, which in
// the all-in-one serves every component. ok is false when they are not there (an aggregator
// running as its own process serves them on its own admin address).
func scrapeViewsMetrics(ctx context.Context, cl *http.Client, base string) viewsMetrics {
	var buf bytes.Buffer
	code, err := do(ctx, cl, http.MethodGet, base+"/metrics", nil, &buf)
	if err != nil || code != http.StatusOK {
		return viewsMetrics{}
	}
	var m viewsMetrics
	var ok1, ok2, ok3 bool
	m.records, ok1 = metricSum(buf.Bytes(), "tally_views_records_total")
	m.flushSum, ok2 = metricSum(buf.Bytes(), "tally_views_flush_seconds_sum")
	m.flushCount, ok3 = metricSum(buf.Bytes(), "tally_views_flush_seconds_count")
	m.ok = ok1 && ok2 && ok3
	return m
}

// metricSum adds up every sample of metric name (all label sets) in a Prometheus text
// exposition; ok is false when there is none.
func metricSum(text []byte, name string) (sum float64, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, name)
		if !found || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		ok = true
	}
	return sum, ok
}
