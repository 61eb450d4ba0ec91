package clicks

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/dedupe"
)

// store reads and writes the click tables (schemas/migrations/006_clicks.sql).
type store struct {
	conn driver.Conn
}

// clickColumns are the end-offset columns of a clicks batch, for its fence (docs/EXACTLY_ONCE.md):
// a batch of epoch e is invalid when a claim of a later epoch started before its end in either
// topic.
var clickColumns = []string{"clicks_end", "verdicts_end"}

// checkpoint is where a partition resumes and what its state was there.
type checkpoint struct {
	at        offsets
	rolled    offsets
	watermark int64
	found     bool
}

// loadCheckpoint reads partition p's checkpoint from the marker of its last valid batch.
func (s store) loadCheckpoint(ctx context.Context, p int32, invalid string) (checkpoint, error) {
	var cp checkpoint
	var n uint64
	err := s.conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(), max(clicks_end), max(verdicts_end),
			argMax(toUnixTimestamp64Milli(watermark), (clicks_end, verdicts_end)),
			argMax(rolled_clicks, (clicks_end, verdicts_end)), argMax(rolled_verdicts, (clicks_end, verdicts_end))
		FROM click_deltas WHERE ad_id = '' AND partition = ? AND NOT (%s)`, invalid), uint16(p)).
		Scan(&n, &cp.at.clicks, &cp.at.verdicts, &cp.watermark, &cp.rolled.clicks, &cp.rolled.verdicts)
	if err != nil {
		return cp, fmt.Errorf("load checkpoint of click partition %d: %w", p, err)
	}
	cp.found = n > 0
	return cp, nil
}

// hoursAfter lists the (ad, campaign, device, hour) buckets of partition p's batches that end
// beyond rolled or match extra (zombie batches): the hours whose rollups are not vouched for.
func (s store) hoursAfter(ctx context.Context, p int32, rolled offsets, extra string) ([]hourKey, error) {
	var out []hourKey
	err := chclient.Each(ctx, s.conn, fmt.Sprintf(`SELECT DISTINCT ad_id, campaign_id, device, toInt64(toUnixTimestamp(toStartOfHour(minute))) FROM click_deltas
		WHERE partition = ? AND ad_id != '' AND (clicks_end > ? OR verdicts_end > ? OR (%s))`, extra),
		[]any{uint16(p), rolled.clicks, rolled.verdicts}, func(rows driver.Rows) error {
			var k hourKey
			if err := rows.Scan(&k.ad, &k.campaign, &k.device, &k.hour); err != nil {
				return err
			}
			out = append(out, k)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("find unrolled hours of click partition %d: %w", p, err)
	}
	return out, nil
}

// loadDedupe restores into win the clicks counted in batches up to the checkpoint that are still
// held.
func (s store) loadDedupe(ctx context.Context, p int32, at offsets, win *dedupe.Window) error {
	err := chclient.Each(ctx, s.conn, `SELECT DISTINCT click_id, ad_id, toUnixTimestamp64Milli(ts) FROM clicks_counted
		WHERE partition = ? AND clicks_end <= ? AND verdicts_end <= ? AND toUnixTimestamp64Milli(ts) >= ?`,
		[]any{uint16(p), at.clicks, at.verdicts, win.LiveSince()}, func(rows driver.Rows) error {
			var id, ad string
			var ts int64
			if err := rows.Scan(&id, &ad, &ts); err != nil {
				return err
			}
			win.RestorePair(dedupe.Key(id, ad), ts)
			return nil
		})
	if err != nil {
		return fmt.Errorf("load counted clicks of partition %d: %w", p, err)
	}
	return nil
}

// loadVerdicts returns the latest verdict, up to the checkpoint at, of each click id in ids, or
// (ids nil) of every click id whose verdict was held at or after heldSince.
func (s store) loadVerdicts(ctx context.Context, p int32, at offsets, ids []string, heldSince int64) (map[string]verdictState, error) {
	cond, args := "held_from >= ?", []any{uint16(p), at.clicks, at.verdicts, heldSince}
	if ids != nil {
		ctx = chclient.FitList(ctx, ids, 1)
		cond, args = "click_id IN (?)", []any{uint16(p), at.clicks, at.verdicts, ids}
	}
	out := map[string]verdictState{}
	err := chclient.Each(ctx, s.conn, fmt.Sprintf(`SELECT click_id, argMax(verdict, (decided_at, verdict)), toUnixTimestamp64Milli(max(decided_at)), max(held_from)
		FROM click_verdicts WHERE partition = ? AND clicks_end <= ? AND verdicts_end <= ? AND %s GROUP BY click_id`, cond), args, func(rows driver.Rows) error {
		var id string
		var v uint8
		var st verdictState
		if err := rows.Scan(&id, &v, &st.decided, &st.held); err != nil {
			return err
		}
		st.verdict = schemas.Verdict(v)
		out[id] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load verdicts of partition %d: %w", p, err)
	}
	return out, nil
}

// loadCounted returns the clicks counted up to the checkpoint at with the given ids (DISTINCT
// merges a replay's copy of a row, not two clicks: each row carries its click's offset).
func (s store) loadCounted(ctx context.Context, p int32, at offsets, ids []string) (map[string][]storedClick, error) {
	ctx = chclient.FitList(ctx, ids, 1)
	out := map[string][]storedClick{}
	err := chclient.Each(ctx, s.conn, `SELECT DISTINCT click_id, click_offset, ad_id, campaign_id, device, toUnixTimestamp64Milli(ts), score_over FROM clicks_counted
		WHERE partition = ? AND clicks_end <= ? AND verdicts_end <= ? AND click_id IN (?)`,
		[]any{uint16(p), at.clicks, at.verdicts, ids}, func(rows driver.Rows) error {
			var id string
			var c storedClick
			var over uint8
			var offset int64
			if err := rows.Scan(&id, &offset, &c.ad, &c.campaign, &c.device, &c.ts, &over); err != nil {
				return err
			}
			c.scoreOver = over == 1
			out[id] = append(out[id], c)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("load counted clicks of partition %d: %w", p, err)
	}
	return out, nil
}

// writeFacts writes the counted clicks and verdicts of parts' pending batches, tagged with the
// batch. Written before the deltas; a replay writes the same facts again.
func (s store) writeFacts(ctx context.Context, parts []*partition) error {
	const clicks = "INSERT INTO clicks_counted (partition, clicks_end, verdicts_end, ad_id, campaign_id, device, click_id, ts, score_over, click_offset)"
	err := chclient.Insert(ctx, s.conn, "counted clicks", clicks, func(add func(...any) error) error {
		for _, p := range parts {
			for _, c := range p.counted {
				if err := add(uint16(p.id), p.next.clicks, p.next.verdicts, c.ad, c.campaign, c.device, c.id, time.UnixMilli(c.ts), b2i(c.scoreOver), c.offset); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	const verdicts = "INSERT INTO click_verdicts (partition, clicks_end, verdicts_end, click_id, ad_id, verdict, reason, decided_at, held_from)"
	return chclient.Insert(ctx, s.conn, "verdicts", verdicts, func(add func(...any) error) error {
		for _, p := range parts {
			wm := p.win.Watermark()
			for _, v := range p.verdicts {
				if err := add(uint16(p.id), p.next.clicks, p.next.verdicts, v.ClickID, v.AdID, uint8(v.Verdict), v.Reason, time.UnixMilli(v.DecidedAt), wm); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// writeDeltas writes every pending batch of parts, deltas and marker, in one INSERT.
func (s store) writeDeltas(ctx context.Context, parts []*partition, now time.Time) error {
	const insert = `INSERT INTO click_deltas (partition, epoch, clicks_end, verdicts_end, watermark, rolled_clicks, rolled_verdicts, ad_id, campaign_id, device, minute, clicks, billable)`
	return chclient.Insert(ctx, s.conn, "click deltas", insert, func(add func(...any) error) error {
		for _, p := range parts {
			wm := time.UnixMilli(max(p.win.Watermark(), 0))
			row := func(g group, minute time.Time, d delta) error {
				return add(uint16(p.id), p.epoch, p.next.clicks, p.next.verdicts, wm, p.rolled.clicks, p.rolled.verdicts, g.ad, g.campaign, g.device, minute, d.clicks, d.billable)
			}
			for k, d := range p.deltas {
				if d.clicks == 0 && d.billable == 0 {
					continue
				}
				if err := row(k.group, time.Unix(k.minute, 0), *d); err != nil {
					return err
				}
			}
			if err := row(group{}, now.Truncate(time.Minute), delta{}); err != nil {
				return fmt.Errorf("marker: %w", err)
			}
		}
		return nil
	})
}

// rollUp recomputes the full value of each hour in hours from click_deltas and writes it with
// its version (the version of the partition it belongs to), so a later write (a newer
// checkpoint) replaces it and an equal one is the same value: per group into click_group_hours,
// and per ad, the sum of the ad's groups, into clicks_by_hour. An hour with no deltas left (its
// only batch was a zombie's) is written as zero. invalid excludes zombie batches.
func (s store) rollUp(ctx context.Context, hours []hourKey, versions []uint64, invalid string) error {
	if len(hours) == 0 {
		return nil
	}
	sums, err := s.sumHours(ctx, hours, invalid)
	if err != nil {
		return err
	}
	type adHour struct {
		ad   string
		hour int64
	}
	type row struct {
		clicks, billable int64
		version          uint64
	}
	groupRows := make([][]any, len(hours))
	adRows := map[adHour]*row{}
	var adOrder []adHour
	for i, h := range hours {
		d := sums[h]
		groupRows[i] = []any{h.campaign, h.device, h.ad, time.Unix(h.hour, 0), d.clicks, d.billable, versions[i]}
		k := adHour{h.ad, h.hour}
		if adRows[k] == nil {
			adRows[k] = &row{}
			adOrder = append(adOrder, k)
		}
		adRows[k].version = max(adRows[k].version, versions[i])
	}
	for k, d := range sums {
		if r := adRows[adHour{k.ad, k.hour}]; r != nil {
			r.clicks += d.clicks
			r.billable += d.billable
		}
	}
	adValues := make([][]any, len(adOrder))
	for i, k := range adOrder {
		r := adRows[k]
		adValues[i] = []any{k.ad, time.Unix(k.hour, 0), r.clicks, r.billable, r.version}
	}
	asIs := func(v []any) []any { return v }
	if err := chclient.InsertBlocks(ctx, s.conn, "INSERT INTO click_group_hours (campaign_id, device, ad_id, hour, clicks, billable, version)", len(groupRows), groupRows, asIs); err != nil {
		return err
	}
	return chclient.InsertBlocks(ctx, s.conn, "INSERT INTO clicks_by_hour (ad_id, hour, clicks, billable, version)", len(adValues), adValues, asIs)
}

// sumHours sums click_deltas outside invalid per (ad, campaign, device, hour) over the ads of
// hours and the hours' span: every group of those ads, not only the hours' own, since an ad's
// hour in clicks_by_hour is the sum of all its groups.
func (s store) sumHours(ctx context.Context, hours []hourKey, invalid string) (map[hourKey]delta, error) {
	lo, hi := hours[0].hour, hours[0].hour
	ads := map[string]bool{}
	var adList []string
	for _, h := range hours {
		lo, hi = min(lo, h.hour), max(hi, h.hour)
		if !ads[h.ad] {
			ads[h.ad] = true
			adList = append(adList, h.ad)
		}
	}
	// The ads and the hours' span select the rows; the hours wanted are picked out by the
	// caller (a literal list of tuples costs the server more to parse than the rows cost).
	sums := make(map[hourKey]delta, len(hours))
	err := chclient.Each(chclient.FitList(ctx, adList, 1), s.conn, fmt.Sprintf(`SELECT ad_id, campaign_id, device, toInt64(toUnixTimestamp(toStartOfHour(minute))) AS hs, sum(clicks), sum(billable)
		FROM click_deltas WHERE ad_id IN (?) AND minute >= toDateTime(%d) AND minute < toDateTime(%d) AND NOT (%s)
		GROUP BY ad_id, campaign_id, device, hs`, lo, hi+3600, invalid), []any{adList}, func(rows driver.Rows) error {
		var k hourKey
		var d delta
		if err := rows.Scan(&k.ad, &k.campaign, &k.device, &k.hour, &d.clicks, &d.billable); err != nil {
			return err
		}
		sums[k] = d
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sum %d click hours: %w", len(hours), err)
	}
	return sums, nil
}
