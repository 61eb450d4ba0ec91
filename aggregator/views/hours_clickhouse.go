package views

import (
	"context"
	"fmt"
	"time"

	"github.com/tallypipeline/tally/schemas/viewerhours"
)

// insertHours sends the registers each partition's views set, one row per (item, hour) with the
// hour's registers and its minutes', to the sketches ClickHouse keeps per item and hour
// (migrations 022, 023).
func (s *store) insertHours(ctx context.Context, parts []map[hourKey]*viewerhours.Hour) error {
	n := 0
	for _, hs := range parts {
		n += len(hs)
	}
	if n == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO unique_viewers_by_hour (item_id, hour, registers, minutes)")
	if err != nil {
		return fmt.Errorf("prepare unique viewers by hour: %w", err)
	}
	defer b.Abort()
	for _, hs := range parts {
		for k, r := range hs {
			regs, ranks, keys, minuteRanks := r.Pairs()
			if err := b.Append(k.item, time.Unix(int64(k.hour)*3600, 0).UTC(), []any{regs, ranks}, []any{keys, minuteRanks}); err != nil {
				return fmt.Errorf("append unique viewers of %s by hour: %w", k.item, err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert unique viewers of %d (item, hour) keys: %w", n, err)
	}
	return nil
}
