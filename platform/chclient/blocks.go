package chclient

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Insert sends the rows fill appends (add takes one row's columns in the statement's order) with
// the statement insert in one block; what names the rows in errors. The batch is prepared at the
// first row (preparing asks the server for the table's columns), so no rows cost no statement.
func Insert(ctx context.Context, conn driver.Conn, what, insert string, fill func(add func(columns ...any) error) error) error {
	var b driver.Batch
	var prepareErr error
	add := func(columns ...any) error {
		if b == nil {
			if b, prepareErr = conn.PrepareBatch(ctx, insert); prepareErr != nil {
				b = nil
				return prepareErr
			}
		}
		return b.Append(columns...)
	}
	err := fill(add)
	if b != nil {
		defer b.Abort()
	}
	switch {
	case prepareErr != nil:
		return fmt.Errorf("prepare the insert of %s: %w", what, prepareErr)
	case err != nil:
		return fmt.Errorf("append %s: %w", what, err)
	case b == nil:
		return nil
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %s: %w", what, err)
	}
	return nil
}

// InsertBlocks inserts rows with the statement insert, perBlock rows to a batch (one part each,
// so a write of millions of rows is a few blocks rather than one that must fit in memory at
// once), each row's columns as values gives them. A failure leaves the blocks sent before it.
func InsertBlocks[R any](ctx context.Context, conn driver.Conn, insert string, perBlock int, rows []R, values func(R) []any) error {
	for i := 0; i < len(rows); i += perBlock {
		block := rows[i:min(i+perBlock, len(rows))]
		err := Insert(ctx, conn, "rows of "+insert, insert, func(add func(...any) error) error {
			for _, r := range block {
				if err := add(values(r)...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
