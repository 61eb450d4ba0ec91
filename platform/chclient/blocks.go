package chclient

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// InsertBlocks inserts rows with the statement insert, perBlock rows to a batch (one part each,
// so a write of millions of rows is a few blocks rather than one that must fit in memory at
// once), each row's columns as values gives them. A failure leaves the blocks sent before it.
func InsertBlocks[R any](ctx context.Context, conn driver.Conn, insert string, perBlock int, rows []R, values func(R) []any) error {
	for i := 0; i < len(rows); i += perBlock {
		b, err := conn.PrepareBatch(ctx, insert)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", insert, err)
		}
		for _, r := range rows[i:min(i+perBlock, len(rows))] {
			if err := b.Append(values(r)...); err != nil {
				b.Abort()
				return fmt.Errorf("append a row to %s: %w", insert, err)
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("%s: %w", insert, err)
		}
	}
	return nil
}
