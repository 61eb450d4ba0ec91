// Package recount is the nightly views recount (batchjob views --date D): it counts the day's
// views again from the sink's files with the streaming aggregator's dedupe rule (package
// schemas/dedupe, the same code, with the same window and grace: viewconf.Rules, views.*; an edge server's view count
// is counted once per (source, seq) and adds its count), compares each item's count
// with the streaming total in ClickHouse (views_total_by_day), and writes a versioned report
// (view_recount_runs, view_recount_diffs). Expected: no difference.
//
// It also checks the stream's own tables against each other: while view_deltas still holds the
// day whole (the table's TTL, which the aggregator sets from aggregator.ttl_seconds), every bucket of the day in each rollup (views_by_minute,
// views_by_hour, views_total_by_day; views_by_day is a view of the last) must equal the deltas in it. A bucket that
// does not (a repair refused or wrong, deltas lost after their rollups were written) is a
// difference of the report too: a row of view_recount_diffs whose item_id is
// "table/bucket/item" (no item id holds a '/'), with the deltas' sum as files and the rollup's
// as clickhouse. Deltas of a zombie's batch not yet undone (minutes after it landed) would show
// as well; a run for a day at least a day old finds none.
//
// The streaming rule is decided per Kafka partition in log order, so the recount reads each
// partition's records in offset order (rawlog.Source) and keeps one dedupe.Window per
// partition. A view at the start of the day may be a duplicate of one shortly before it, so the
// read starts Lookback earlier (at least window + grace); views of that span only prime the
// windows. The recount agrees with the stream when no pair's chain of views less than a window
// apart reaches back past the lookback, and no event far outside the read span (more than the
// lookback after the day) raised a partition's watermark in between; otherwise the items
// concerned are reported as differences, which is what the report is for.
//
// Run holds no goroutines; it reads, compares, then writes the report.
package recount

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas/dedupe"
	"github.com/tallypipeline/tally/schemas/viewconf"
	"github.com/tallypipeline/tally/sink/rawlog"
)

// Deps is what a run reads and writes.
type Deps struct {
	Source     rawlog.Source[rawlog.ViewKey] // the sink's files of topic views
	SourceName string                        // "files" or "kafka", for the report
	ClickHouse driver.Conn                   // database with the migrations applied
	Rules      viewconf.Rules                // the streaming dedupe rule (views.*)
	Lookback   time.Duration                 // batchjob.views_lookback
	Progress   *progress.Meter               // counts the records read (nil: not counted)
	Logger     *slog.Logger
	Now        func() time.Time
}

// Report is what one run found.
type Report struct {
	Version      uint64
	StartedAt    time.Time
	FinishedAt   time.Time
	Day          time.Time
	Source       string
	Records      uint64 // records read, views and view counts (lookback included)
	Counted      uint64 // the day's views that count (a view count's count included)
	ItemsChecked uint64
	Diffs        []Diff
	// RollupsCompared says whether view_deltas still held the day whole, so that the rollups
	// were compared with it; RollupDiffs are the buckets that differ.
	RollupsCompared bool
	RollupDiffs     []RollupDiff
}

// Diff is one item whose recount differs from the streaming total.
type Diff struct {
	ItemID     string
	Files      int64 // recounted from the files
	ClickHouse int64 // streaming total
}

// RollupDiff is one rollup bucket of the day that differs from the deltas in it.
type RollupDiff struct {
	Table  string
	Bucket time.Time
	ItemID string
	Deltas int64 // the sum of view_deltas in the bucket
	Rollup int64 // the rollup's
}

// reportID is the diff row's item_id: table, bucket and item, '/' apart.
func (d RollupDiff) reportID() string {
	b := d.Bucket.UTC().Format(time.DateTime)
	if d.Table == "views_total_by_day" {
		b = d.Bucket.UTC().Format(time.DateOnly)
	}
	return d.Table + "/" + b + "/" + d.ItemID
}

// Summary is the one line the command prints.
func (r Report) Summary() string {
	rollups := "rollups not compared (view_deltas no longer holds the day)"
	if r.RollupsCompared {
		rollups = fmt.Sprintf("%d rollup buckets unlike the deltas", len(r.RollupDiffs))
	}
	return fmt.Sprintf("view recount version %d day %s from %s: %d records read, %d views counted, %d items checked, %d differences, %s, took %s",
		r.Version, r.Day.Format(time.DateOnly), r.Source, r.Records, r.Counted, r.ItemsChecked, len(r.Diffs), rollups, r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond))
}

// Differs reports whether the run found any difference: of an item, or of a rollup bucket.
func (r Report) Differs() bool { return len(r.Diffs) > 0 || len(r.RollupDiffs) > 0 }

// Run recounts day (UTC midnight) and writes the report.
func Run(ctx context.Context, day time.Time, d Deps) (Report, error) {
	rep := Report{StartedAt: d.Now().UTC(), Day: day.UTC(), Source: d.SourceName}
	counts, records, err := Count(ctx, d.Source, day, d.Rules, d.Lookback, d.Progress)
	rep.Records = records
	if err != nil {
		return rep, err
	}
	for _, n := range counts {
		rep.Counted += uint64(n)
	}
	stream, err := streamingTotals(ctx, d.ClickHouse, day)
	if err != nil {
		return rep, err
	}
	items := map[string]bool{}
	for it := range counts {
		items[it] = true
	}
	for it := range stream {
		items[it] = true
	}
	rep.ItemsChecked = uint64(len(items))
	for it := range items {
		if counts[it] != stream[it] {
			rep.Diffs = append(rep.Diffs, Diff{ItemID: it, Files: counts[it], ClickHouse: stream[it]})
		}
	}
	sort.Slice(rep.Diffs, func(i, j int) bool { return rep.Diffs[i].ItemID < rep.Diffs[j].ItemID })
	ttl, err := deltasTTL(ctx, d.ClickHouse)
	if err != nil {
		return rep, err
	}
	// The deltas of a second are kept ttl after it; an hour of margin for the merges that apply
	// the TTL and for clocks, as the aggregator's repair keeps.
	if rep.RollupsCompared = ttl == 0 || !day.Before(rep.StartedAt.Add(-ttl+time.Hour)); rep.RollupsCompared {
		if rep.RollupDiffs, err = rollupDiffs(ctx, d.ClickHouse, day); err != nil {
			return rep, err
		}
	} else {
		d.Logger.Warn("view_deltas no longer holds the day whole: its rollups are not compared with it", "day", day.Format(time.DateOnly), "deltas_ttl", ttl)
	}
	d.Logger.Info("views recounted", "day", day.Format(time.DateOnly), "records", rep.Records, "counted", rep.Counted,
		"items", rep.ItemsChecked, "differences", len(rep.Diffs), "rollups_compared", rep.RollupsCompared, "rollup_differences", len(rep.RollupDiffs))
	for _, df := range rep.RollupDiffs[:min(20, len(rep.RollupDiffs))] {
		d.Logger.Warn("rollup bucket unlike the deltas", "table", df.Table, "bucket", df.Bucket, "item", df.ItemID, "deltas", df.Deltas, "rollup", df.Rollup)
	}
	rep.FinishedAt = d.Now().UTC()
	if rep.Version, err = writeReport(ctx, d.ClickHouse, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// Count recounts the views of day (UTC) per item from src with the dedupe rule, reading from
// lookback before the day, and returns the counts and how many records it read; meter, if not
// nil, is given the records to read (the files' footers) and counts them as they are read.
func Count(ctx context.Context, src rawlog.Source[rawlog.ViewKey], day time.Time, rules viewconf.Rules, lookback time.Duration, meter *progress.Meter) (map[string]int64, uint64, error) {
	from, to := day.Add(-lookback), day.Add(24*time.Hour)
	lo, hi := day.UnixMilli(), to.UnixMilli()
	wins := map[int32]*dedupe.Window{}
	counts := map[string]int64{}
	var n uint64
	if meter != nil {
		total, err := src.Rows(ctx, from, to.Add(lookback))
		if err != nil {
			return nil, 0, fmt.Errorf("size the read of views of %s: %w", day.Format(time.DateOnly), err)
		}
		meter.SetTotal(total)
	}
	err := src.Read(ctx, from, to.Add(lookback), func(p int32, rows []rawlog.ViewKey) error {
		w := wins[p]
		if w == nil {
			w = dedupe.New(rules.DedupeWindow.Milliseconds(), rules.DedupeGrace.Milliseconds())
			wins[p] = w
		}
		for i := range rows {
			r := &rows[i]
			key, n := dedupe.Key(r.ViewerID, r.ItemID), int64(1)
			if r.IsViewCount() {
				key, n = dedupe.CountKey(r.SourceID, r.Seq), int64(r.Count)
			}
			if w.Observe(key, r.TS) && r.TS >= lo && r.TS < hi {
				counts[r.ItemID] += n
			}
		}
		n += uint64(len(rows))
		if meter != nil {
			meter.Add(int64(len(rows)))
		}
		return nil
	})
	if err != nil {
		return nil, n, fmt.Errorf("read views of %s: %w", day.Format(time.DateOnly), err)
	}
	return counts, n, nil
}

func streamingTotals(ctx context.Context, conn driver.Conn, day time.Time) (map[string]int64, error) {
	out := map[string]int64{}
	err := chclient.Pairs(ctx, conn, "SELECT item_id, toInt64(sum(views)) FROM views_total_by_day WHERE day = ? GROUP BY item_id",
		[]any{day.Format(time.DateOnly)}, func(item string, n int64) {
			if n != 0 {
				out[item] = n
			}
		})
	if err != nil {
		return nil, fmt.Errorf("read streaming view totals of %s: %w", day.Format(time.DateOnly), err)
	}
	return out, nil
}

// rollup is one table that sums view_deltas per item and time bucket (as the aggregator writes
// them: aggregator/views/rollups_clickhouse.go; the job links no component's code).
type rollup struct {
	table, column, expr string // expr: the bucket of view_deltas.second
}

var rollupTables = []rollup{
	{"views_by_minute", "minute", "toStartOfMinute(second)"},
	{"views_by_hour", "hour", "toStartOfHour(second)"},
	{"views_total_by_day", "day", "toDate(second)"},
}

// rollupDiffs returns every bucket of day in the rollups that differs from the sum of
// view_deltas in it, by table, item and bucket.
func rollupDiffs(ctx context.Context, conn driver.Conn, day time.Time) ([]RollupDiff, error) {
	var out []RollupDiff
	d := day.Format(time.DateOnly)
	for _, r := range rollupTables {
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT item_id, toDateTime(b), w, h FROM (
				SELECT item_id, b, sum(w) AS w, sum(h) AS h FROM (
					SELECT item_id, %[3]s AS b, toInt64(views) AS w, toInt64(0) AS h FROM view_deltas
					WHERE item_id != '' AND toDate(second) = toDate(?)
					UNION ALL
					SELECT item_id, %[2]s AS b, toInt64(0) AS w, toInt64(views) AS h FROM %[1]s
					WHERE toDate(%[2]s) = toDate(?)
				) GROUP BY item_id, b
			) WHERE w != h ORDER BY item_id, b`, r.table, r.column, r.expr), d, d)
		if err != nil {
			return nil, fmt.Errorf("compare %s of %s with view_deltas: %w", r.table, d, err)
		}
		for rows.Next() {
			df := RollupDiff{Table: r.table}
			if err := rows.Scan(&df.ItemID, &df.Bucket, &df.Deltas, &df.Rollup); err != nil {
				rows.Close()
				return nil, fmt.Errorf("scan a bucket of %s unlike view_deltas: %w", r.table, err)
			}
			out = append(out, df)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("compare %s of %s with view_deltas: %w", r.table, d, err)
		}
	}
	return out, nil
}

// writeReport stores rep as version max+1 of either table: diff rows first, the run row last.
func writeReport(ctx context.Context, conn driver.Conn, rep Report) (uint64, error) {
	var version uint64
	if err := conn.QueryRow(ctx, `SELECT greatest(
		(SELECT max(version) FROM view_recount_runs),
		(SELECT max(version) FROM view_recount_diffs)) + 1`).Scan(&version); err != nil {
		return 0, fmt.Errorf("read last view recount version: %w", err)
	}
	day := rep.Day.Format(time.DateOnly)
	if rep.Differs() {
		b, err := conn.PrepareBatch(ctx, "INSERT INTO view_recount_diffs (version, day, item_id, files, clickhouse, diff)")
		if err != nil {
			return 0, fmt.Errorf("prepare view recount diffs insert: %w", err)
		}
		defer b.Abort()
		for _, df := range rep.Diffs {
			if err := b.Append(version, rep.Day, df.ItemID, df.Files, df.ClickHouse, df.ClickHouse-df.Files); err != nil {
				return 0, fmt.Errorf("append view recount diff of %s: %w", df.ItemID, err)
			}
		}
		for _, df := range rep.RollupDiffs {
			if err := b.Append(version, rep.Day, df.reportID(), df.Deltas, df.Rollup, df.Rollup-df.Deltas); err != nil {
				return 0, fmt.Errorf("append view recount diff of %s: %w", df.reportID(), err)
			}
		}
		if err := b.Send(); err != nil {
			return 0, fmt.Errorf("insert view recount diffs of version %d: %w", version, err)
		}
	}
	err := conn.Exec(ctx, `INSERT INTO view_recount_runs
		(version, started_at, finished_at, day, source, records, counted, items_checked, differences) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		version, rep.StartedAt, rep.FinishedAt, day, rep.Source, rep.Records, rep.Counted, rep.ItemsChecked, uint64(len(rep.Diffs)+len(rep.RollupDiffs)))
	if err != nil {
		return 0, fmt.Errorf("insert view recount run of version %d: %w", version, err)
	}
	return version, nil
}
