package engine

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Names are a stream's metric names, each tally_<stream>_…. The rule set writes them out in full,
// so that a search of the tree for a metric (the dashboards' and alerts' tests) finds where it is
// registered.
type Names struct {
	Records      string // tally_<stream>_records_total
	Counted      string // tally_<stream>_counted_total
	SetAside     string // tally_<stream>_undecodable_total
	FlushSeconds string // tally_<stream>_flush_seconds
	FlushErrors  string // tally_<stream>_flush_errors_total
	Fenced       string // tally_<stream>_fenced_partitions_total
	Lag          string // tally_<stream>_flush_lag_seconds
	ClaimSeconds string // tally_<stream>_claim_seconds
}

// metrics are what every stream counts.
type metrics struct {
	records, counted, setAside prometheus.Counter
	flushSeconds, claimSeconds prometheus.Histogram
	flushErrors, fenced        prometheus.Counter
	lag                        prometheus.Gauge
}

func newMetrics(n Names, reg prometheus.Registerer) metrics {
	m := metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: n.Records,
			Help: "Records consumed from the stream's topics (a replay counts them again)."}),
		counted: prometheus.NewCounter(prometheus.CounterOpts{Name: n.Counted,
			Help: "Events counted after dedupe (first in their window); a counted edge view count adds its count."}),
		setAside: prometheus.NewCounter(prometheus.CounterOpts{Name: n.SetAside,
			Help: "Records set aside in dead_letters because they did not decode or validate, as processed (a replay counts them again)."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: n.FlushSeconds,
			Help: "Time to write one flush that wrote a batch.", Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: n.FlushErrors,
			Help: "ClickHouse steps that failed and were retried."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: n.Fenced,
			Help: "Partitions dropped before writing because a newer owner had claimed them."}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: n.Lag,
			Help: "Age of the oldest unflushed batch at the last flush."}),
		claimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: n.ClaimSeconds,
			Help:    "Time to claim one assigned partition and load its state, failed claims included (a handover waits for its assignment's claims).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
	}
	reg.MustRegister(m.records, m.counted, m.setAside, m.flushSeconds, m.flushErrors, m.fenced, m.lag, m.claimSeconds)
	return m
}
