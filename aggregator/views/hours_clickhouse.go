package views

import (
	"context"
	"fmt"
	"time"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas/viewerhours"
)

// insertHours sends the registers each partition's views set, one row per (item, hour) with the
// hour's registers and its minutes', to the sketches ClickHouse keeps per item and hour
// (migrations 022, 023).
func (s *store) insertHours(ctx context.Context, parts []map[hourKey]*viewerhours.Hour) error {
	const insert = "INSERT INTO unique_viewers_by_hour (item_id, hour, registers, minutes)"
	return chclient.Insert(ctx, s.conn, "unique viewers by hour", insert, func(add func(...any) error) error {
		for _, hs := range parts {
			for k, r := range hs {
				regs, ranks, keys, minuteRanks := r.Pairs()
				if err := add(k.item, time.Unix(int64(k.hour)*3600, 0).UTC(), []any{regs, ranks}, []any{keys, minuteRanks}); err != nil {
					return fmt.Errorf("%s: %w", k.item, err)
				}
			}
		}
		return nil
	})
}
