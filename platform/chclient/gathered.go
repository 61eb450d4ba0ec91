package chclient

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Column gathers one column of an INSERT's rows in a slice that is kept from one batch to the
// next. Appended row by row (driver.Batch.Append), clickhouse-go boxes every value in an
// interface, several allocations a row; a flush of a million rows spends more on that than on
// its data. A batch gathered column by column is handed over a column at a time instead
// (SendColumns). Not safe for concurrent use: its owner serialises the batches it gathers.
type Column[T any] struct{ v []T }

// Add appends one row's value.
func (c *Column[T]) Add(v T) { c.v = append(c.v, v) }

// Len is the rows gathered.
func (c *Column[T]) Len() int { return len(c.v) }

// Values is the gathered slice, as a batch column's Append takes it.
func (c *Column[T]) Values() any { return c.v }

// Reset empties the column, keeping its room; the values it held are cleared so that the slice
// keeps none of them (item ids, sketches) alive.
func (c *Column[T]) Reset() {
	clear(c.v)
	c.v = c.v[:0]
}

// Gathered is a Column of any type.
type Gathered interface {
	Len() int
	Values() any
	Reset()
}

// SendColumns inserts the rows gathered in cols with the statement insert, whose column list
// names them in the same order, and resets the columns whatever the outcome (a retry gathers
// again). Columns of unequal lengths are refused; no rows send nothing.
func SendColumns(ctx context.Context, conn driver.Conn, insert string, cols ...Gathered) error {
	defer func() {
		for _, c := range cols {
			c.Reset()
		}
	}()
	if len(cols) == 0 {
		return nil
	}
	rows := cols[0].Len()
	for i, c := range cols[1:] {
		if c.Len() != rows {
			return fmt.Errorf("%s: column %d holds %d rows; column 0 holds %d", insert, i+1, c.Len(), rows)
		}
	}
	if rows == 0 {
		return nil
	}
	b, err := conn.PrepareBatch(ctx, insert)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", insert, err)
	}
	defer b.Abort()
	for i, c := range cols {
		if err := b.Column(i).Append(c.Values()); err != nil {
			return fmt.Errorf("append column %d to %s: %w", i, insert, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("%s: %w", insert, err)
	}
	return nil
}
