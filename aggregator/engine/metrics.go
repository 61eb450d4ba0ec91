package engine

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are what every stream counts, named tally_<stream>_….
type metrics struct {
	records, counted, setAside prometheus.Counter
	flushSeconds               prometheus.Histogram
	flushErrors, fenced        prometheus.Counter
	lag                        prometheus.Gauge
}

func newMetrics(stream string, reg prometheus.Registerer) metrics {
	name := func(s string) string { return fmt.Sprintf("tally_%s_%s", stream, s) }
	m := metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: name("records_total"),
			Help: "Records consumed from the stream's topics (a replay counts them again)."}),
		counted: prometheus.NewCounter(prometheus.CounterOpts{Name: name("counted_total"),
			Help: "Events counted after dedupe (first in their window); a counted edge view count adds its count."}),
		setAside: prometheus.NewCounter(prometheus.CounterOpts{Name: name("undecodable_total"),
			Help: "Records set aside in dead_letters because they did not decode or validate, as processed (a replay counts them again)."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: name("flush_seconds"),
			Help: "Time to write one flush that wrote a batch.", Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: name("flush_errors_total"),
			Help: "ClickHouse steps that failed and were retried."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: name("fenced_partitions_total"),
			Help: "Partitions dropped before writing because a newer owner had claimed them."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("flush_lag_seconds"),
			Help: "Age of the oldest unflushed batch at the last flush."}),
	}
	reg.MustRegister(m.records, m.counted, m.setAside, m.flushSeconds, m.flushErrors, m.fenced, m.lag)
	return m
}
