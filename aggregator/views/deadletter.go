package views

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/axiomhq/hyperloglog"
	"github.com/prometheus/client_golang/prometheus"

	"tally/schemas"
)

// Poison data: a record of the views topic that does not decode or fails validation, or a
// stored sketch that does not read back, is set aside in the dead_letters table
// (schemas/migrations/005_dead_letters.sql) with a log line and a metric, and counting goes on.
//
// A record is set aside when it is first processed in a batch (offset at or above the deltas
// checkpoint), and its dead letter is written before that batch's deltas and marker, like the
// dedupe state: a crash in between replays the batch, which sets aside the same records (the
// decision depends on the bytes alone) and writes the same rows again, which the table's
// ReplacingMergeTree keeps once. The record still advances the partition's offset, so the
// checkpoint moves past it and it is never retried.

// maxPayload bounds the bytes of a bad record or row kept in its dead letter.
const maxPayload = 64 << 10

// deadLetter is one piece of data set aside.
type deadLetter struct {
	source    string // topic or table
	partition int32  // -1 for a table row
	offset    int64  // record offset, or the row's version
	ref       string // what a table row belonged to
	reason    string
	payload   []byte
}

// deadLetters writes dead letters and reports them; safe for concurrent use.
type deadLetters struct {
	now     func() time.Time
	logger  *slog.Logger
	written *prometheus.CounterVec
}

func newDeadLetters(now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *deadLetters {
	d := &deadLetters{
		now:    now,
		logger: logger,
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_dead_letters_total",
			Help: "Records or rows set aside in the dead_letters table, by source (a replay writes its batch's again)."}, []string{"source"}),
	}
	reg.MustRegister(d.written)
	return d
}

// setAside records that the record at offset is not counted. Only records first processed in
// this batch are set aside: one below the deltas checkpoint was set aside when first counted.
func (p *partition) setAside(offset int64, value []byte, err error) {
	p.dead = append(p.dead, deadLetter{
		source:    schemas.TopicViews,
		partition: p.id,
		offset:    offset,
		reason:    err.Error(),
		payload:   value[:min(len(value), maxPayload)],
	})
}

// writePending writes the dead letters of parts' pending batches and forgets them. It runs
// before the batches' deltas are written.
func (d *deadLetters) writePending(ctx context.Context, conn driver.Conn, parts []*partition) error {
	var all []deadLetter
	for _, p := range parts {
		all = append(all, p.dead...)
	}
	if err := d.write(ctx, conn, all); err != nil {
		return err
	}
	for _, p := range parts {
		p.dead = nil
	}
	return nil
}

// write inserts dls and logs each one.
func (d *deadLetters) write(ctx context.Context, conn driver.Conn, dls []deadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	now := d.now()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO dead_letters (source, partition, offset, ref, reason, payload, seen_at)")
	if err != nil {
		return fmt.Errorf("prepare dead letter insert: %w", err)
	}
	defer b.Abort()
	for _, dl := range dls {
		if err := b.Append(dl.source, dl.partition, dl.offset, dl.ref, dl.reason, string(dl.payload), now); err != nil {
			return fmt.Errorf("append dead letter of %s %d/%d: %w", dl.source, dl.partition, dl.offset, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d dead letters: %w", len(dls), err)
	}
	for _, dl := range dls {
		d.written.WithLabelValues(dl.source).Inc()
		d.logger.Warn("set aside in dead_letters", "source", dl.source, "partition", dl.partition, "offset", dl.offset,
			"ref", dl.ref, "reason", dl.reason, "bytes", len(dl.payload))
	}
	return nil
}

// decodeStoredSketch reads a sketch stored in unique_viewers or unique_viewer_deltas. Anything
// but a well-formed precision-14 axiomhq sketch is an error, never a panic: the bytes come from
// a table anyone with write access can change, and one bad row must not stop every sketch write.
func decodeStoredSketch(blob []byte) (sk *hyperloglog.Sketch, err error) {
	defer func() {
		if r := recover(); r != nil {
			sk, err = nil, fmt.Errorf("decode stored sketch: malformed (%v)", r)
		}
	}()
	// Byte 1 of axiomhq's encoding is the precision; sketches of another one cannot merge.
	if len(blob) >= 2 && blob[1] != 14 {
		return nil, fmt.Errorf("decode stored sketch: precision %d; want 14", blob[1])
	}
	sk = hyperloglog.New14()
	if err := sk.UnmarshalBinary(blob); err != nil {
		return nil, fmt.Errorf("decode stored sketch: %w", err)
	}
	return sk, nil
}

// badSketch is the dead letter of a stored sketch that does not read back. version is the row's
// updated_at in microseconds, so that the row is named exactly.
func badSketch(item string, day uint32, version int64, blob string, err error) deadLetter {
	return deadLetter{
		source:    "unique_viewers",
		partition: -1,
		offset:    version,
		ref:       fmt.Sprintf("item_id=%s day=%s", item, time.Unix(int64(day)*86400, 0).UTC().Format(time.DateOnly)),
		reason:    err.Error() + "; replaced by a fresh sketch",
		payload:   []byte(blob[:min(len(blob), maxPayload)]),
	}
}

// badDelta is the dead letter of a stored sketch delta that does not read back, named by its
// partition, end offset and key.
func badDelta(part int32, end int64, item string, day uint32, blob string, err error) deadLetter {
	return deadLetter{
		source:    "unique_viewer_deltas",
		partition: part,
		offset:    end,
		ref:       fmt.Sprintf("item_id=%s day=%s", item, time.Unix(int64(day)*86400, 0).UTC().Format(time.DateOnly)),
		reason:    err.Error() + "; skipped",
		payload:   []byte(blob[:min(len(blob), maxPayload)]),
	}
}
