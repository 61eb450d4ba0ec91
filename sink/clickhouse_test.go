package sink_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// writeViews writes views as one flush of partition p through the sink's file format.
func writeViews(t *testing.T, st store.Store, p int32, first int64, views []schemas.View) {
	t.Helper()
	topic, _ := rawlog.TopicByName(schemas.TopicViews)
	values := make([][]byte, len(views))
	for i, v := range views {
		values[i] = schemas.AppendView(nil, v)
	}
	if err := rawlog.WriteFlush(st, topic, p, first, values); err != nil {
		t.Fatal(err)
	}
}

// TestClickHouseReadsTheFiles runs the queries of deploy/README.md ("Reading the sink's
// files") on the embedded engine, as the pipeline user: the engine's guard lets only that user
// read files, and only under the sink's directory. The dashboards user is refused.
func TestClickHouseReadsTheFiles(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(filesDir)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	want := map[string]uint64{}
	for p := range int32(2) {
		var views []schemas.View
		for i := range 1000 {
			item := fmt.Sprintf("item-%d", (i+int(p))%7)
			ts := day.Add(time.Duration(i%3) * time.Hour).Add(time.Duration(i) * time.Second)
			views = append(views, schemas.View{ItemID: item, ViewerID: fmt.Sprintf("u%d", i), EventID: fmt.Sprintf("p%d-e%d", p, i), TS: ts.UnixMilli()})
			want[item]++
		}
		writeViews(t, st, p, 0, views)
	}
	conn, err := chclient.Open(ctx, chclient.Options{Addr: clickhouse.Addr(), Database: "tally", Username: "default", Password: testPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	day1 := filepath.Join(filesDir, "views", "2026-12-01", "*", "*.parquet")

	t.Run("schema", func(t *testing.T) {
		rows, err := conn.Query(ctx, fmt.Sprintf("DESCRIBE file('%s', 'Parquet')", day1))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var name, typ, a, b, c, d, e string
			if err := rows.Scan(&name, &typ, &a, &b, &c, &d, &e); err != nil {
				t.Fatal(err)
			}
			got = append(got, name+" "+typ)
		}
		if s := strings.Join(got, ", "); !strings.Contains(s, "partition Nullable(Int32)") && !strings.Contains(s, "partition Int32") ||
			!strings.Contains(s, "ts ") || !strings.Contains(s, "DateTime64(3") || !strings.Contains(s, "item_id ") {
			t.Fatalf("columns: got %s; want partition, offset, ts DateTime64(3), item_id, viewer_id, event_id", s)
		}
	})
	t.Run("views per item", func(t *testing.T) {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT item_id, sum(count) AS views FROM file('%s', 'Parquet') GROUP BY item_id ORDER BY views DESC", day1))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]uint64{}
		for rows.Next() {
			var item string
			var n uint64
			if err := rows.Scan(&item, &n); err != nil {
				t.Fatal(err)
			}
			got[item] = n
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("views per item: got %v; want %v", got, want)
		}
	})
	t.Run("views per hour", func(t *testing.T) {
		var hours, total uint64
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT uniqExact(toStartOfHour(ts)), count() FROM file('%s', 'Parquet')
			WHERE ts >= toDateTime64('2026-12-01 00:00:00', 3, 'UTC')`, day1)).Scan(&hours, &total)
		if err != nil || hours != 3 || total != 2000 {
			t.Fatalf("got %d hours, %d views, %v; want 3, 2000", hours, total, err)
		}
	})
	t.Run("no record twice", func(t *testing.T) {
		var dups uint64
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count() FROM (SELECT partition, offset, count() AS c
			FROM file('%s', 'Parquet') GROUP BY partition, offset HAVING c > 1)`, filepath.Join(filesDir, "views", "*", "*", "*.parquet"))).Scan(&dups)
		if err != nil || dups != 0 {
			t.Fatalf("got %d duplicated records, %v; want 0", dups, err)
		}
	})
	t.Run("views carried by view counts", func(t *testing.T) {
		topic, _ := rawlog.TopicByName(schemas.TopicViews)
		sec := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC).Unix()
		values := [][]byte{
			schemas.AppendView(nil, schemas.View{ItemID: "short-1", ViewerID: "u1", TS: sec * 1000}),
			schemas.AppendViewCount(nil, schemas.ViewCount{ItemID: "short-1", Second: sec, Count: 5000, SourceID: "edge-1", Seq: 1}),
			schemas.AppendViewCount(nil, schemas.ViewCount{ItemID: "short-1", Second: sec + 1, Count: 700, SourceID: "edge-2", Seq: 9}),
		}
		if err := rawlog.WriteFlush(st, topic, 0, 0, values); err != nil {
			t.Fatal(err)
		}
		var views, counted, rows uint64
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT sum(count), sumIf(count, source_id != ''), count() FROM file('%s', 'Parquet') WHERE item_id = 'short-1'`,
			filepath.Join(filesDir, "views", "2026-12-02", "*", "*.parquet"))).Scan(&views, &counted, &rows)
		if err != nil || views != 5701 || counted != 5700 || rows != 3 {
			t.Fatalf("got %d views, %d from view counts, %d rows, %v; want 5701, 5700, 3", views, counted, rows, err)
		}
	})
	t.Run("dashboards user refused", func(t *testing.T) {
		q := url.Values{"query": {fmt.Sprintf("SELECT count() FROM file('%s', 'Parquet')", day1)}}
		req, _ := http.NewRequest("POST", "http://"+clickhouse.Addr()+"/?"+q.Encode(), nil)
		req.SetBasicAuth("dashboards", "")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("dashboards user: got %d %s; want 403", resp.StatusCode, body)
		}
	})
}
