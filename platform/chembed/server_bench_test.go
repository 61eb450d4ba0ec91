package chembed

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

const benchRows = 100_000

// BenchmarkBatchInsert100k measures clickhouse-go PrepareBatch/Append/Send
// of 100k rows through the HTTP interface into the engine, LZ4 on.
func BenchmarkBatchInsert100k(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn := openConn(b, newDatabase(b), &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	if err := conn.Exec(ctx, eventsDDL); err != nil {
		b.Fatalf("create table: %v", err)
	}
	rows := make([]eventRow, benchRows)
	for i := range rows {
		rows[i] = makeEvent(i)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO events")
		if err != nil {
			b.Fatalf("prepare batch: %v", err)
		}
		for _, r := range rows {
			if err := batch.Append(r.ID, r.Delta, r.Name, r.TS, r.TSms, r.Note, r.Kind, r.Tags, r.Score); err != nil {
				b.Fatalf("append: %v", err)
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatalf("send: %v", err)
		}
	}
	b.ReportMetric(float64(b.N*benchRows)/b.Elapsed().Seconds(), "rows/s")
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
