// Package recount is the nightly views recount (batchjob views --date D): it counts the day's
// views again from the sink's files with the streaming aggregator's dedupe rule (package
// schemas/dedupe, the same code, with the same window and grace; an edge server's view count
// is counted once per (source, seq) and adds its count), compares each item's count
// with the streaming total in ClickHouse (views_total_by_day), and writes a versioned report
// (view_recount_runs, view_recount_diffs). Expected: no difference.
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

	"tally/platform/progress"
	"tally/schemas/dedupe"
	"tally/sink/rawlog"
)

// Deps is what a run reads and writes.
type Deps struct {
	Source     rawlog.Source[rawlog.ViewKey] // the sink's files of topic views
	SourceName string                        // "files" or "kafka", for the report
	ClickHouse driver.Conn                   // database with the migrations applied
	Window     time.Duration                 // aggregator.dedupe_window
	Grace      time.Duration                 // aggregator.dedupe_grace
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
}

// Diff is one item whose recount differs from the streaming total.
type Diff struct {
	ItemID     string
	Files      int64 // recounted from the files
	ClickHouse int64 // streaming total
}

// Summary is the one line the command prints.
func (r Report) Summary() string {
	return fmt.Sprintf("view recount version %d day %s from %s: %d records read, %d views counted, %d items checked, %d differences, took %s",
		r.Version, r.Day.Format(time.DateOnly), r.Source, r.Records, r.Counted, r.ItemsChecked, len(r.Diffs), r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond))
}

// Run recounts day (UTC midnight) and writes the report.
func Run(ctx context.Context, day time.Time, d Deps) (Report, error) {
	rep := Report{StartedAt: d.Now().UTC(), Day: day.UTC(), Source: d.SourceName}
	counts, records, err := Count(ctx, d.Source, day, d.Window, d.Grace, d.Lookback, d.Progress)
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
	d.Logger.Info("views recounted", "day", day.Format(time.DateOnly), "records", rep.Records, "counted", rep.Counted,
		"items", rep.ItemsChecked, "differences", len(rep.Diffs))
	rep.FinishedAt = d.Now().UTC()
	if rep.Version, err = writeReport(ctx, d.ClickHouse, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// Count recounts the views of day (UTC) per item from src with the dedupe rule, reading from
// lookback before the day, and returns the counts and how many records it read; meter, if not
// nil, is given the records to read (the files' footers) and counts them as they are read.
func Count(ctx context.Context, src rawlog.Source[rawlog.ViewKey], day time.Time, window, grace, lookback time.Duration, meter *progress.Meter) (map[string]int64, uint64, error) {
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
			w = dedupe.New(window.Milliseconds(), grace.Milliseconds())
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
	rows, err := conn.Query(ctx, "SELECT item_id, toInt64(sum(views)) FROM views_total_by_day WHERE day = ? GROUP BY item_id", day.Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("read streaming view totals of %s: %w", day.Format(time.DateOnly), err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var item string
		var n int64
		if err := rows.Scan(&item, &n); err != nil {
			return nil, fmt.Errorf("scan streaming view total: %w", err)
		}
		if n != 0 {
			out[item] = n
		}
	}
	return out, rows.Err()
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
	if len(rep.Diffs) > 0 {
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
		if err := b.Send(); err != nil {
			return 0, fmt.Errorf("insert view recount diffs of version %d: %w", version, err)
		}
	}
	err := conn.Exec(ctx, `INSERT INTO view_recount_runs
		(version, started_at, finished_at, day, source, records, counted, items_checked, differences) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		version, rep.StartedAt, rep.FinishedAt, day, rep.Source, rep.Records, rep.Counted, rep.ItemsChecked, uint64(len(rep.Diffs)))
	if err != nil {
		return 0, fmt.Errorf("insert view recount run of version %d: %w", version, err)
	}
	return version, nil
}
