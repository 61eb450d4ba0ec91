package archive

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	records, undecodable, files, rows, deleted *prometheus.CounterVec
	commitErrors                               prometheus.Counter
	flushSeconds                               prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) metrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"topic"})
	}
	m := metrics{
		records:      vec("tally_sink_records_total", "Records read by the sink (replays included)."),
		undecodable:  vec("tally_sink_undecodable_total", "Records that did not decode and are kept in no file."),
		files:        vec("tally_sink_files_total", "Sink files written."),
		rows:         vec("tally_sink_rows_total", "Rows written into sink files (replays included)."),
		deleted:      vec("tally_sink_retention_deleted_files_total", "Sink files deleted by retention."),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_sink_commit_errors_total", Help: "Kafka offset commits of the sink that failed and were retried."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_sink_flush_seconds", Help: "Time to write and commit one flush of a partition.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	reg.MustRegister(m.records, m.undecodable, m.files, m.rows, m.deleted, m.commitErrors, m.flushSeconds)
	return m
}
