package views

import (
	"fmt"
	"time"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/schemas"
)

// Poison data (the dead letters themselves: package aggregator/deadletter): a record of the views topic that does not decode or fails validation, or a
// stored sketch that does not read back, is set aside in the dead_letters table
// (schemas/migrations/005_dead_letters.sql) with a log line and a metric, and counting goes on.
//
// A record is set aside when it is first processed in a batch (offset at or above the deltas
// checkpoint), and its dead letter is written before that batch's deltas and marker, like the
// dedupe state: a crash in between replays the batch, which sets aside the same records (the
// decision depends on the bytes alone) and writes the same rows again, which the table's
// ReplacingMergeTree keeps once. The record still advances the partition's offset, so the
// checkpoint moves past it and it is never retried.

// setAside records that the record at offset is not counted. Only records first processed in
// this batch are set aside: one below the deltas checkpoint was set aside when first counted.
func (p *partition) setAside(offset int64, value []byte, err error) {
	p.dead = append(p.dead, deadletter.OfRecord(schemas.TopicViews, p.id, offset, nil, value, err))
}

// The dead_letters sources of stored sketch rows that do not read back, named by their tables.
const (
	sourceUniqueViewers      = "unique_viewers"
	sourceUniqueViewerDeltas = "unique_viewer_deltas"
)

// badSketch is the dead letter of a stored sketch of k that does not read back (err): a row of
// source named by part and offset (a whole sketch: -1 and its updated_at in microseconds, so that
// the row is named exactly; a delta: its partition and end offset), with then, what became of it.
func badSketch(source string, part int32, offset int64, k sketchKey, blob string, err error, then string) deadletter.Letter {
	return deadletter.Letter{
		Source:    source,
		Partition: part,
		Offset:    offset,
		Ref:       fmt.Sprintf("item_id=%s day=%s", k.item, dayOf(k).Format(time.DateOnly)),
		Reason:    err.Error() + "; " + then,
		Payload:   []byte(blob[:min(len(blob), deadletter.MaxPayload)]),
	}
}
