// Package rawlog is the format of the sink's files, the raw event log kept beyond Kafka's
// retention: which topics are kept, one Parquet row type per topic (one column per field, plus
// the record's partition and offset), the file names, writing one hour's file of a partition, and
// reading files back for the nightly jobs (read.go). With store it is the sink's public read
// API: the nightly jobs import these two (and the settings leaf sinkconf) and nothing else of the
// sink.
//
// A file holds the records of one topic partition, within one offset range, whose event time
// falls in one UTC hour; its name says all four:
//
//	<topic>/<YYYY-MM-DD>/<HH>/p<partition>-<first offset>-<last offset>.parquet
//
// (partition 4 digits, offsets 20, zero-padded, so names sort by partition and then offset). The
// range is that of the sink's flush that wrote it: every record of the partition from first to
// last went into exactly one hour's file of that range (or was undecodable and kept in none), so
// the files of a partition never overlap and leave no gap.
//
// Rows are written in offset order; columns are zstd-compressed.
//
// The topics of one Topics call share a zstd encoder (safe for concurrent use); nothing else
// holds state between calls, and a Batch belongs to one goroutine.
package rawlog

import (
	"time"

	"github.com/tallypipeline/tally/schemas"
)

// Topic is one kept topic: its name, its default retention and how its records become rows.
type Topic struct {
	Name string
	// Retention is how long its files are kept by default (whole hours; sink.retention_by_topic
	// overrides it).
	Retention time.Duration
	// NewBatch starts a flush's files of one partition; open creates the file of an hour.
	NewBatch func(open OpenHour) Batch
}

const day = 24 * time.Hour

// Topics is the table of kept topics. Adding one is one entry: its row type (rows.go) and its
// decoder.
func Topics() []Topic {
	opts := writerOptions(newPageCodec())
	return []Topic{
		define(schemas.TopicViews, 7*day, decodeView, opts),
		// Likes are state (the log is their source of truth): kept longer.
		define(schemas.TopicLikes, 90*day, decodeLike, opts),
		define(schemas.TopicClicks, 7*day, decodeClick, opts),
		define(schemas.TopicFraudVerdicts, 7*day, decodeFraudVerdict, opts),
	}
}

// TopicByName finds a topic of the table.
func TopicByName(name string) (Topic, bool) {
	for _, t := range Topics() {
		if t.Name == name {
			return t, true
		}
	}
	return Topic{}, false
}
