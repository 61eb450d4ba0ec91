package counters

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/read"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/schemas"
)

// eventual is the eventual mode's side of the routes: an add becomes a record of the
// counter_events topic, acknowledged by Kafka before it is answered, which the aggregators
// count exactly once into counter_deltas; a read sums that table.
type eventual struct {
	producer       *kgo.Client
	produceTimeout time.Duration
	conn           driver.Conn
	tail           tail
	// reads bounds the ClickHouse reads running at once, so that readers cannot crowd the
	// pipeline's writes out of an embedded engine; a read that waits readWait for a slot is
	// answered 503.
	reads chan struct{}
}

// readWait is how long a read waits for a slot.
const readWait = 2 * time.Second

func newEventual(producer *kgo.Client, produceTimeout time.Duration, conn driver.Conn, maxReads int) *eventual {
	return &eventual{producer: producer, produceTimeout: produceTimeout, conn: conn, tail: tail{cl: producer, topic: schemas.TopicCounterEvents},
		reads: make(chan struct{}, max(1, maxReads))}
}

// errBusy is a read that found no slot in time.
var errBusy = fmt.Errorf("counter reads are over capacity")

// write writes one add or clear (op) to the log.
func (e *eventual) write(ctx context.Context, ns counters.Namespace, name, op string, delta int64, token string, at time.Time) error {
	return e.produce(ctx, record(ns, name, counterEvent(ns, name, op, delta, token, at)))
}

// counterEvent is an add or a clear (op) of counter name of ns as the log carries it.
func counterEvent(ns counters.Namespace, name, op string, delta int64, token string, at time.Time) schemas.CounterEvent {
	return schemas.CounterEvent{Op: op, Namespace: ns.Name, Generation: ns.Generation, Name: name, Delta: delta,
		Token: token, TS: at.UnixMilli(), Window: ns.IdempotencyWindow.Milliseconds(), Retention: int64(ns.Retention / time.Second)}
}

// record is ev as a record of the log, under its counter's key.
func record(ns counters.Namespace, name string, ev schemas.CounterEvent) *kgo.Record {
	return &kgo.Record{Topic: schemas.TopicCounterEvents, Key: schemas.CounterKey(ns.Name, name), Value: schemas.AppendCounterEvent(nil, ev)}
}

// produce writes recs to the log, waiting for Kafka's acknowledgement of every one.
func (e *eventual) produce(ctx context.Context, recs ...*kgo.Record) error {
	pctx, cancel := context.WithTimeout(ctx, e.produceTimeout)
	defer cancel()
	if err := e.producer.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("write %d records (the first of %s) to the log: %w", len(recs), recs[0].Key, err)
	}
	return nil
}

// get reads the counters names of ns, in order: the sum of their counted adds, and for an
// accurate namespace the adds after the checkpoint as well (accurate.go).
func (e *eventual) get(ctx context.Context, ns counters.Namespace, names []string) ([]int64, error) {
	if err := e.slot(ctx); err != nil {
		return nil, err
	}
	defer func() { <-e.reads }()
	s, err := e.snapshotOf(ctx, ns, names)
	if err != nil {
		return nil, err
	}
	sums, err := e.sums(ctx, ns, names, s.upTo)
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		sums[i], _ = fold(sums[i], s.events[n])
	}
	return sums, nil
}

// snapshotOf is an accurate namespace's snapshot of names, and for an eventual one the rows
// written so far alone.
func (e *eventual) snapshotOf(ctx context.Context, ns counters.Namespace, names []string) (snapshot, error) {
	if ns.Mode == counters.ModeAccurate {
		return e.snapshot(ctx, ns, names)
	}
	return snapshot{upTo: "1"}, nil
}

// sums sums the rows of names in ns that meet the condition upTo, in order.
func (e *eventual) sums(ctx context.Context, ns counters.Namespace, names []string, upTo string) ([]int64, error) {
	sums := make(map[string]int64, len(names))
	err := chclient.Pairs(ctx, e.conn, `SELECT name, sum(delta) FROM counter_deltas WHERE ns = ? AND generation = ? AND name IN (?) AND `+upTo+` GROUP BY name`,
		[]any{ns.Name, ns.Generation, names}, func(name string, s int64) { sums[name] = s })
	if err != nil {
		return nil, fmt.Errorf("read counters of %s: %w", ns.Name, err)
	}
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = sums[n]
	}
	return out, nil
}

// series sums counter name of ns per bucket of g in [from, to), keyed by the bucket's start in
// Unix seconds. counter_deltas holds minutes; hours and days are summed from them. An accurate
// namespace's adds after the checkpoint go to their buckets too.
func (e *eventual) series(ctx context.Context, ns counters.Namespace, name string, g read.Granularity, from, to time.Time) (map[int64]int64, error) {
	if err := e.slot(ctx); err != nil {
		return nil, err
	}
	defer func() { <-e.reads }()
	s, err := e.snapshotOf(ctx, ns, []string{name})
	if err != nil {
		return nil, err
	}
	out, err := e.buckets(ctx, ns, name, g, from, to, s.upTo)
	if err != nil || len(s.events[name]) == 0 {
		return out, err
	}
	total, err := e.sums(ctx, ns, []string{name}, s.upTo)
	if err != nil {
		return nil, err
	}
	_, minutes := fold(total[0], s.events[name])
	for m, d := range minutes {
		if t := time.Unix(m, 0); !t.Before(from) && t.Before(to) {
			out[t.Truncate(g.Step()).Unix()] += d
		}
	}
	return out, nil
}

// buckets sums the rows of counter name of ns that meet upTo per bucket of g in [from, to).
func (e *eventual) buckets(ctx context.Context, ns counters.Namespace, name string, g read.Granularity, from, to time.Time, upTo string) (map[int64]int64, error) {
	bucket := map[read.Granularity]string{read.Minute: "minute", read.Hour: "toStartOfHour(minute)", read.Day: "toDateTime(toStartOfDay(minute), 'UTC')"}[g]
	out := map[int64]int64{}
	err := chclient.Pairs(ctx, e.conn, fmt.Sprintf(`SELECT toInt64(toUnixTimestamp(%s)) AS t, sum(delta) FROM counter_deltas
		WHERE ns = ? AND generation = ? AND name = ? AND minute >= ? AND minute < ? AND %s GROUP BY t`, bucket, upTo),
		[]any{ns.Name, ns.Generation, name, from.UTC(), to.UTC()}, func(t, s int64) { out[t] = s })
	if err != nil {
		return nil, fmt.Errorf("read series of %s/%s: %w", ns.Name, name, err)
	}
	return out, nil
}

// slot takes one of the read slots, waiting at most readWait.
func (e *eventual) slot(ctx context.Context) error {
	t := time.NewTimer(readWait)
	defer t.Stop()
	select {
	case e.reads <- struct{}{}:
		return nil
	case <-t.C:
		return errBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}
