package likes

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// maxPayload bounds the bytes of a bad record kept in its dead letter.
const maxPayload = 64 << 10

// badRecord is a like record that does not decode or validate (schemas.DecodeLike).
type badRecord struct {
	rec *kgo.Record
	err error
}

// setAside writes bad records to the dead_letters table (schemas/migrations/005_dead_letters.sql)
// and logs each, before the batch's good records are inserted: a replay sets aside the same
// records (the decision depends on the bytes alone) and its rows replace the first ones.
func (l *Loader) setAside(ctx context.Context, bad []badRecord) error {
	if len(bad) == 0 {
		return nil
	}
	// seen_at is the server's time (the column's default).
	b, err := l.conn.PrepareBatch(ctx, "INSERT INTO dead_letters (source, partition, offset, ref, reason, payload)")
	if err != nil {
		return fmt.Errorf("prepare dead letter insert: %w", err)
	}
	defer b.Abort()
	for _, r := range bad {
		v := r.rec.Value
		if err := b.Append(r.rec.Topic, r.rec.Partition, r.rec.Offset, string(r.rec.Key), r.err.Error(), string(v[:min(len(v), maxPayload)])); err != nil {
			return fmt.Errorf("append dead letter of %s %d/%d: %w", r.rec.Topic, r.rec.Partition, r.rec.Offset, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d dead letters: %w", len(bad), err)
	}
	for _, r := range bad {
		l.logger.Warn("set aside in dead_letters", "source", r.rec.Topic, "partition", r.rec.Partition, "offset", r.rec.Offset,
			"reason", r.err, "bytes", len(r.rec.Value))
	}
	return nil
}
