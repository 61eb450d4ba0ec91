package clicks

import (
	"context"
	"time"

	"github.com/tallypipeline/tally/platform/logread"
)

// Click is one click record of the raw log, with where the log holds it: (Partition, Offset)
// breaks ties between occurrences of one click id stamped in the same millisecond, so every
// run picks the same one.
type Click struct {
	ClickID       string
	AdID          string
	CampaignID    string
	Device        string
	TS            int64 // event time, Unix ms
	FraudScore    float64
	HasFraudScore bool
	Partition     int32
	Offset        int64
}

// Verdict is one fraud verdict record of the log.
type Verdict struct {
	ClickID   string
	Fraud     bool // false: "valid"
	Reason    string
	DecidedAt int64 // Unix ms
	Partition int32
	Offset    int64
}

// Source is the raw log a run counts: the day's clicks and the verdicts. The Kafka topics are
// one source (KafkaSource); the sink's hourly Parquet files of the same records, with the Kafka
// records not yet in files, are another (FilesSource), and a run does not care which it is
// given. Calls are made one at a time.
type Source interface {
	// Clicks calls fn with every click whose event time lies in [from, to), in batches, each
	// with how many log records it came from (read counts them all, decodable or not). Records
	// outside the range may be read but are not passed on.
	Clicks(ctx context.Context, from, to time.Time, fn func(read int64, b []Click) error) (logread.Stats, error)
	// Verdicts calls fn with every verdict on a click stamped at or after since (and possibly
	// older ones), in batches, each with how many log records it came from.
	Verdicts(ctx context.Context, since time.Time, fn func(read int64, b []Verdict) error) (logread.Stats, error)
	// Size is how many records Clicks(from, to) and then Verdicts(from) would read if called
	// now, found without reading them (Kafka offsets, the files' footers): the progress line's
	// total. Records produced in between make the reads a little longer.
	Size(ctx context.Context, from, to time.Time) (int64, error)
	// Name says which source it is, for the report ("kafka", "parquet", "parquet+kafka"); asked
	// after the reads.
	Name() string
}
