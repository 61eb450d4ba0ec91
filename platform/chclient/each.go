package chclient

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Each runs query with args and calls row for each row it returns, stopping at the first error
// row returns, so that a reader writes its scan and nothing of the loop around it. It closes the
// rows whatever the outcome and reports an error that ends them early (rows.Err), which a loop on
// rows.Next alone would take for the end of the result. The error comes back as the query, the
// rows or row gave it: the caller wraps it once with what it was reading.
func Each(ctx context.Context, conn driver.Conn, query string, args []any, row func(driver.Rows) error) error {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Pairs runs query with args, whose rows have two columns, and calls pair with each row's
// columns scanned as A and B: the two-column reads (a key and its value) write only what they do
// with a row. Errors come back as Each's.
func Pairs[A, B any](ctx context.Context, conn driver.Conn, query string, args []any, pair func(A, B)) error {
	return Each(ctx, conn, query, args, func(rows driver.Rows) error {
		var a A
		var b B
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		pair(a, b)
		return nil
	})
}
