package chclient

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// columnsConn is a driver.Conn whose batch INSERTs learn their column types once. Over HTTP,
// clickhouse-go asks the server for a table's columns (DESCRIBE TABLE) before every batch, a
// round trip and a statement per INSERT; a flush sends several, and the embedded engine runs
// one statement at a time. The types are kept per INSERT statement and forgotten when a batch of
// it fails, so a table altered since is described again at the next batch.
type columnsConn struct {
	driver.Conn
	mu    sync.Mutex
	known map[string][]clickhouse.ColumnNameAndType // by INSERT statement
}

// insertInto matches the INSERT statements whose columns can be learned: a table and an explicit
// column list, the only form tally sends.
var insertInto = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+([A-Za-z0-9_.]+)\s*\(([^)]*)\)\s*$`)

func (c *columnsConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	m := insertInto.FindStringSubmatch(query)
	if m == nil {
		return c.Conn.PrepareBatch(ctx, query, opts...)
	}
	c.mu.Lock()
	cols, ok := c.known[query]
	c.mu.Unlock()
	if !ok {
		var err error
		if cols, err = c.describe(ctx, m[1], strings.Split(m[2], ",")); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.known[query] = cols
		c.mu.Unlock()
	}
	b, err := c.Conn.PrepareBatch(clickhouse.Context(ctx, clickhouse.WithColumnNamesAndTypes(cols)), query, opts...)
	if err != nil {
		c.forget(query)
		return nil, err
	}
	return &columnsBatch{Batch: b, forget: func() { c.forget(query) }}, nil
}

func (c *columnsConn) forget(query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.known, query)
}

// describe returns the types of table's columns named in names, in that order.
func (c *columnsConn) describe(ctx context.Context, table string, names []string) ([]clickhouse.ColumnNameAndType, error) {
	rows, err := c.Conn.Query(ctx, "DESCRIBE TABLE "+table)
	if err != nil {
		return nil, fmt.Errorf("describe table %s: %w", table, err)
	}
	defer rows.Close()
	types := map[string]string{}
	for rows.Next() {
		var name, typ, defaultKind, ignore string
		if err := rows.Scan(&name, &typ, &defaultKind, &ignore, &ignore, &ignore, &ignore); err != nil {
			return nil, fmt.Errorf("describe table %s: %w", table, err)
		}
		if defaultKind != "MATERIALIZED" && defaultKind != "ALIAS" { // not insertable
			types[name] = typ
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe table %s: %w", table, err)
	}
	cols := make([]clickhouse.ColumnNameAndType, len(names))
	for i, n := range names {
		n = strings.Trim(strings.TrimSpace(n), "`")
		typ, ok := types[n]
		if !ok {
			return nil, fmt.Errorf("insert into %s: no insertable column %s", table, n)
		}
		cols[i] = clickhouse.ColumnNameAndType{Name: n, Type: typ}
	}
	return cols, nil
}

// columnsBatch forgets its statement's columns when it fails to send: the table may have changed.
type columnsBatch struct {
	driver.Batch
	forget func()
}

func (b *columnsBatch) Send() error {
	err := b.Batch.Send()
	if err != nil {
		b.forget()
	}
	return err
}
