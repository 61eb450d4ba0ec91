package likes

import (
	"context"
	"fmt"

	"tally/likestate"
)

// maxPayload bounds the bytes of a bad record kept in its dead letter.
const maxPayload = 64 << 10

// setAside writes bad records to the dead_letters table (schemas/migrations/005_dead_letters.sql)
// and logs each, before the batch's good records are inserted: a replay sets aside the same
// records (the decision depends on the bytes alone) and its rows replace the first ones.
func (l *Loader) setAside(ctx context.Context, bad []likestate.BadRecord) error {
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
		v := r.Rec.Value
		if err := b.Append(r.Rec.Topic, r.Rec.Partition, r.Rec.Offset, string(r.Rec.Key), r.Err.Error(), string(v[:min(len(v), maxPayload)])); err != nil {
			return fmt.Errorf("append dead letter of %s %d/%d: %w", r.Rec.Topic, r.Rec.Partition, r.Rec.Offset, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d dead letters: %w", len(bad), err)
	}
	for _, r := range bad {
		l.logger.Warn("set aside in dead_letters", "source", r.Rec.Topic, "partition", r.Rec.Partition, "offset", r.Rec.Offset,
			"reason", r.Err, "bytes", len(r.Rec.Value))
	}
	return nil
}
