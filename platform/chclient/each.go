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
