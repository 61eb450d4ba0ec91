package clicks

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	countedtopic "github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
)

// Deduplicated click counts for topk (aggregator/counted, kind ads): each durable batch's
// (ad, event-time second, clicks counted after the click-id rule) is published after the
// batch's deltas INSERT. It is the count, not billable_count: verdicts arriving later would
// otherwise change counts topk already ranked. A batch is identified by the clicks offset alone
// (End = clicks_end, Start = the clicks checkpoint before it): verdicts change no count here,
// and a batch that counted a click advanced the clicks offset, so End grows with every
// published batch of an epoch. Batches that counted no click are not published.
//
// A partition whose publish failed, or that was just assigned, first publishes the valid
// batches ClickHouse holds (clicks_counted, joined to the markers that make a batch valid) past
// the last one the counted topic holds, so a crash between the durable write and the publish
// loses nothing; topk's guards skip what is published twice.

// secondCounts returns the pending batch's counted clicks per (ad, second).
func (p *partition) secondCounts() []schemas.BucketCount {
	type adSecond struct {
		ad     string
		second int64
	}
	n := map[adSecond]uint64{}
	for _, c := range p.counted {
		n[adSecond{c.ad, schemas.FloorDiv(c.ts, 1000)}]++
	}
	out := make([]schemas.BucketCount, 0, len(n))
	for k, c := range n {
		out = append(out, schemas.BucketCount{Key: k.ad, Second: k.second, Count: c})
	}
	return out
}

// follow is how this stream's batches reach the counted topic.
func (a *Aggregator) follow() countedtopic.Follow {
	return countedtopic.Follow{Topic: a.cfg.Counted, Kind: schemas.CountAds, Now: a.now, Logger: a.logger, Errors: a.countedErrors}
}

// syncCounted publishes the batch just written (counts, from clicks offset from to
// p.flushed.clicks).
func (a *Aggregator) syncCounted(ctx context.Context, p *partition, counts []schemas.BucketCount, from int64) {
	b := schemas.BatchID{Partition: p.id, Epoch: p.epoch, Start: from, End: p.flushed.clicks}
	a.follow().Batch(ctx, &p.countedEnd, b, counts, a.storedBatches(ctx, p))
}

// storedBatches reads p's valid batches up to its clicks checkpoint.
func (a *Aggregator) storedBatches(ctx context.Context, p *partition) countedtopic.Reader {
	return func(after int64, since time.Time) ([]countedtopic.Stored, error) {
		return a.store.batchSeconds(ctx, p.id, after, p.flushed.clicks, since, p.invalid)
	}
}

// batchSeconds reads partition p's valid batches whose clicks_end is in (after, to], in offset
// order, with their counted clicks of event-time seconds from since on. A batch's clicks are
// the clicks_counted rows tagged with its end offsets (DISTINCT: a replay writes them again,
// with the same click offsets, while two identical clicks have two);
// its marker in click_deltas, outside the fence invalid, makes it valid and gives its epoch.
func (s store) batchSeconds(ctx context.Context, p int32, after, to int64, since time.Time, invalid string) ([]countedtopic.Stored, error) {
	if after >= to {
		return nil, nil
	}
	byEnd := map[int64]*countedtopic.Stored{}
	err := chclient.Each(ctx, s.conn, fmt.Sprintf(`SELECT m.epoch, c.clicks_end, c.ad_id, intDiv(toUnixTimestamp64Milli(c.ts), 1000) AS sec, count()
		FROM (SELECT DISTINCT clicks_end, verdicts_end, click_id, click_offset, ad_id, ts FROM clicks_counted
			WHERE partition = %[1]d AND clicks_end > %[2]d AND clicks_end <= %[3]d AND toUnixTimestamp64Milli(ts) >= %[4]d) AS c
		INNER JOIN (SELECT epoch, clicks_end, verdicts_end FROM click_deltas
			WHERE ad_id = '' AND partition = %[1]d AND clicks_end > %[2]d AND clicks_end <= %[3]d AND NOT (%[5]s)) AS m
		ON c.clicks_end = m.clicks_end AND c.verdicts_end = m.verdicts_end
		GROUP BY m.epoch, c.clicks_end, c.ad_id, sec`, p, after, to, since.UnixMilli(), invalid), nil, func(rows driver.Rows) error {
		var b countedtopic.Stored
		var c schemas.BucketCount
		if err := rows.Scan(&b.Epoch, &b.End, &c.Key, &c.Second, &c.Count); err != nil {
			return err
		}
		cur := byEnd[b.End]
		if cur == nil {
			cur = &b
			byEnd[b.End] = cur
		}
		cur.Counts = append(cur.Counts, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read counted clicks of partition %d after %d: %w", p, after, err)
	}
	out := make([]countedtopic.Stored, 0, len(byEnd))
	for _, b := range byEnd {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(x, y countedtopic.Stored) int { return int(x.End - y.End) })
	return out, nil
}
