package loadgen

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// viewsMetrics are the aggregator's counters of one path (views or clicks) at one moment.
type viewsMetrics struct {
	ok                   bool
	records              float64 // tally_<path>_records_total
	flushSum, flushCount float64 // tally_<path>_flush_seconds
}

// scrapeViewsMetrics reads the aggregator's counters from the collector's /metrics, which in
// the all-in-one serves every component. ok is false when they are not there (an aggregator
// running as its own process serves them on its own admin address).
// prefix names the path's metrics: "tally_views_" or "tally_clicks_".
func scrapeViewsMetrics(ctx context.Context, cl *http.Client, base, prefix string) viewsMetrics {
	text, ok := scrape(ctx, cl, base)
	if !ok {
		return viewsMetrics{}
	}
	var m viewsMetrics
	var ok1, ok2, ok3 bool
	m.records, ok1 = metricSum(text, prefix+"records_total")
	m.flushSum, ok2 = metricSum(text, prefix+"flush_seconds_sum")
	m.flushCount, ok3 = metricSum(text, prefix+"flush_seconds_count")
	m.ok = ok1 && ok2 && ok3
	return m
}

// serverCPU reads the CPU seconds the process serving base has used (process_cpu_seconds_total
// at its /metrics: the whole all-in-one but its redis-server child, or one collector); ok is
// false when the server does not expose it there.
func serverCPU(ctx context.Context, cl *http.Client, base string) (float64, bool) {
	text, ok := scrape(ctx, cl, base)
	if !ok {
		return 0, false
	}
	return metricSum(text, "process_cpu_seconds_total")
}

// scrape reads base's /metrics. /metrics is not part of the API, so it is read with the API
// client's connections but without it.
func scrape(ctx context.Context, cl *http.Client, base string) ([]byte, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, false
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		return nil, false
	}
	return buf.Bytes(), true
}

// metricSum adds up every sample of metric name (all label sets) in a Prometheus text
// exposition; ok is false when there is none. A histogram's _sum and _count are named as in the
// text. Parsing is prometheus/common's, the format's reference parser.
func metricSum(text []byte, name string) (sum float64, ok bool) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return 0, false
	}
	base, part := name, ""
	if f, found := families[name]; found {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Untyped != nil:
				sum += m.GetUntyped().GetValue()
			default:
				continue
			}
			ok = true
		}
		return sum, ok
	}
	for _, suffix := range []string{"_sum", "_count"} {
		if b, found := strings.CutSuffix(name, suffix); found {
			base, part = b, suffix
		}
	}
	f, found := families[base]
	if !found || part == "" {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		if part == "_sum" {
			sum += h.GetSampleSum()
		} else {
			sum += float64(h.GetSampleCount())
		}
		ok = true
	}
	return sum, ok
}
