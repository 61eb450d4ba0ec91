package chembed

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

const benchRows = 100_000

// BenchmarkBatchInsert100k measures clickhouse-go PrepareBatch/Append/Send
// of 100k rows through the HTTP interface into the engine, LZ4 on, for
// the nine-column test table and for a narrow counts-like table. The
// figure includes the client building the batch.
func BenchmarkBatchInsert100k(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn := openConn(b, newDatabase(b), &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	if err := conn.Exec(ctx, eventsDDL); err != nil {
		b.Fatalf("create table: %v", err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE counts (item UInt64, second DateTime, views Int64) ENGINE = MergeTree ORDER BY (item, second)"); err != nil {
		b.Fatalf("create table: %v", err)
	}
	events := make([]eventRow, benchRows)
	for i := range events {
		events[i] = makeEvent(i)
	}
	tests := []struct {
		name   string
		insert string
		append func(batch driver.Batch, i int) error
	}{
		{"events9cols", "INSERT INTO events", func(batch driver.Batch, i int) error {
			r := events[i]
			return batch.Append(r.ID, r.Delta, r.Name, r.TS, r.TSms, r.Note, r.Kind, r.Tags, r.Score)
		}},
		{"counts3cols", "INSERT INTO counts", func(batch driver.Batch, i int) error {
			return batch.Append(uint64(i%5000), eventBase.Add(time.Duration(i/5000)*time.Second), int64(i%7))
		}},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				batch, err := conn.PrepareBatch(ctx, tc.insert)
				if err != nil {
					b.Fatalf("prepare batch: %v", err)
				}
				for i := 0; i < benchRows; i++ {
					if err := tc.append(batch, i); err != nil {
						b.Fatalf("append: %v", err)
					}
				}
				if err := batch.Send(); err != nil {
					b.Fatalf("send: %v", err)
				}
			}
			b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkSelect100k measures reading 100k rows back with clickhouse-go,
// which includes re-encoding chDB's Native output for the client.
func BenchmarkSelect100k(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn := openConn(b, newDatabase(b), &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	if err := conn.Exec(ctx, eventsDDL); err != nil {
		b.Fatalf("create table: %v", err)
	}
	if err := insertEvents(ctx, conn, 0, benchRows); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		rows, err := conn.Query(ctx, "SELECT id, delta, name, ts, ts_ms, note, kind, tags, score FROM events")
		if err != nil {
			b.Fatalf("query: %v", err)
		}
		count := 0
		var r eventRow
		for rows.Next() {
			if err := rows.Scan(&r.ID, &r.Delta, &r.Name, &r.TS, &r.TSms, &r.Note, &r.Kind, &r.Tags, &r.Score); err != nil {
				b.Fatalf("scan: %v", err)
			}
			count++
		}
		if err := rows.Err(); err != nil {
			b.Fatalf("rows: %v", err)
		}
		rows.Close()
		if count != benchRows {
			b.Fatalf("rows: got %d; want %d", count, benchRows)
		}
	}
	b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
}
