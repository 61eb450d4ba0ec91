package views

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// blocks hold the columns of the INSERTs whose rows grow with the items a batch touches (about
// one row per view at a million items), kept from one flush to the next (chclient.Column), each
// beside the statement that names its columns in the same order (send). Each has its own lock:
// the flush writes deltas, batch items, dedupe state and rollups under the engine's lock, the
// sketch deltas beside the consume loop, and a test may write as a zombie beside a flush.
type blocks struct {
	deltas   deltaBlock
	items    itemBlock
	dedupe   dedupeBlock
	rollups  rollupBlock
	sketches sketchBlock
}

// DateTime columns gather Unix seconds, as clickhouse-go takes them for that type: 8 bytes a row
// rather than a time.Time's 24 with a pointer. DateTime64 columns gather times.

type deltaBlock struct {
	sync.Mutex
	partition chclient.Column[uint16]
	end       chclient.Column[int64]
	watermark chclient.Column[time.Time]
	item      chclient.Column[string]
	second    chclient.Column[int64]
	views     chclient.Column[uint64]
	epoch     chclient.Column[uint64]
	rolled    chclient.Column[int64]
}

// add gathers p's checkpoint marker and deltas.
func (b *deltaBlock) add(p *partition, now time.Time) {
	wm := time.UnixMilli(p.win.Watermark()).UTC()
	row := func(item string, second int64, views uint64) {
		b.partition.Add(uint16(p.id))
		b.end.Add(p.next)
		b.watermark.Add(wm)
		b.item.Add(item)
		b.second.Add(second)
		b.views.Add(views)
		b.epoch.Add(p.epoch)
		b.rolled.Add(p.rolled)
	}
	row("", now.Unix(), 0)
	for k, n := range p.deltas {
		row(k.item, k.second, n)
	}
}

// send inserts the gathered rows into table (view_deltas_claimed; tests name view_deltas).
func (b *deltaBlock) send(ctx context.Context, conn driver.Conn, table string) error {
	return chclient.SendColumns(ctx, conn, "INSERT INTO "+table+" (partition, end_offset, watermark, item_id, second, views, epoch, rolled_up_to)",
		&b.partition, &b.end, &b.watermark, &b.item, &b.second, &b.views, &b.epoch, &b.rolled)
}

type itemBlock struct {
	sync.Mutex
	seen      map[string]bool
	partition chclient.Column[uint16]
	end       chclient.Column[int64]
	epoch     chclient.Column[uint64]
	item      chclient.Column[string]
	written   chclient.Column[int64]
}

// add gathers the distinct items of p's deltas.
func (b *itemBlock) add(p *partition, now time.Time) {
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	defer clear(b.seen)
	for k := range p.deltas {
		if b.seen[k.item] {
			continue
		}
		b.seen[k.item] = true
		b.partition.Add(uint16(p.id))
		b.end.Add(p.next)
		b.epoch.Add(p.epoch)
		b.item.Add(k.item)
		b.written.Add(now.Unix())
	}
}

func (b *itemBlock) send(ctx context.Context, conn driver.Conn) error {
	return chclient.SendColumns(ctx, conn, "INSERT INTO batch_items (partition, end_offset, epoch, item_id, written_at)",
		&b.partition, &b.end, &b.epoch, &b.item, &b.written)
}

// dedupeBlock gathers one row per partition: the pairs its batch counted, as arrays. A row per
// pair cost the engine a sort of every flush's pairs by a random hash and merges that rewrote
// them again and again; a batch's row is sorted by its end offset, which every flush raises.
type dedupeBlock struct {
	sync.Mutex
	partition chclient.Column[uint16]
	end       chclient.Column[int64]
	pairs     chclient.Column[[]uint64]
	lasts     chclient.Column[[]int64]
	newest    chclient.Column[int64]
}

// add gathers p's counted pairs, if any. The arrays are p's own: the block is sent and reset
// before the batch is marked flushed, which reuses them.
func (b *dedupeBlock) add(p *partition) {
	if p.counted.len() == 0 {
		return
	}
	b.partition.Add(uint16(p.id))
	b.end.Add(p.next)
	b.pairs.Add(p.counted.pairs)
	b.lasts.Add(p.counted.lasts)
	b.newest.Add(slices.Max(p.counted.lasts))
}

func (b *dedupeBlock) send(ctx context.Context, conn driver.Conn) error {
	return chclient.SendColumns(ctx, conn, "INSERT INTO dedupe_batches (partition, end_offset, pairs, last_ms, newest_ms)",
		&b.partition, &b.end, &b.pairs, &b.lasts, &b.newest)
}

type rollupBlock struct {
	sync.Mutex
	partition chclient.Column[uint16]
	epoch     chclient.Column[uint64]
	item      chclient.Column[string]
	second    chclient.Column[int64]
	views     chclient.Column[int64]
}

func (b *rollupBlock) add(p *partition) {
	for k, n := range p.rollups {
		b.partition.Add(uint16(p.id))
		b.epoch.Add(p.epoch)
		b.item.Add(k.item)
		b.second.Add(k.second)
		b.views.Add(n)
	}
}

func (b *rollupBlock) send(ctx context.Context, conn driver.Conn) error {
	return chclient.SendColumns(ctx, conn, "INSERT INTO view_rollup_claimed (partition, epoch, item_id, second, views)",
		&b.partition, &b.epoch, &b.item, &b.second, &b.views)
}

type sketchBlock struct {
	sync.Mutex
	partition chclient.Column[uint16]
	epoch     chclient.Column[uint64]
	end       chclient.Column[int64]
	item      chclient.Column[string]
	day       chclient.Column[time.Time]
	blob      chclient.Column[string]
	viewers   chclient.Column[uint64]
	written   chclient.Column[time.Time] // DateTime64(6): a time, not seconds
}

func (b *sketchBlock) add(r *sketchRow, now time.Time) {
	b.partition.Add(uint16(r.partition))
	b.epoch.Add(r.epoch)
	b.end.Add(r.end)
	b.item.Add(r.key.item)
	b.day.Add(dayOf(r.key))
	b.blob.Add(r.blob)
	b.viewers.Add(r.viewers)
	b.written.Add(now)
}

func (b *sketchBlock) send(ctx context.Context, conn driver.Conn) error {
	return chclient.SendColumns(ctx, conn, "INSERT INTO unique_viewer_deltas_claimed (partition, epoch, end_offset, item_id, day, sketch, viewers, written_at)",
		&b.partition, &b.epoch, &b.end, &b.item, &b.day, &b.blob, &b.viewers, &b.written)
}
