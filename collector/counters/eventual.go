package counters

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/platform/counters"
	"tally/schemas"
)

// eventual is the eventual mode's side of the routes: an add becomes a record of the
// counter_events topic, acknowledged by Kafka before it is answered, which the aggregators
// count exactly once into counter_deltas; a read sums that table.
type eventual struct {
	producer       *kgo.Client
	produceTimeout time.Duration
	conn           driver.Conn
	// reads bounds the ClickHouse reads running at once, so that readers cannot crowd the
	// pipeline's writes out of an embedded engine; a read that waits readWait for a slot is
	// answered 503.
	reads chan struct{}
}

// readWait is how long a read waits for a slot.
const readWait = 2 * time.Second

func newEventual(producer *kgo.Client, produceTimeout time.Duration, conn driver.Conn, maxReads int) *eventual {
	return &eventual{producer: producer, produceTimeout: produceTimeout, conn: conn, reads: make(chan struct{}, max(1, maxReads))}
}

// errBusy is a read that found no slot in time.
var errBusy = fmt.Errorf("counter reads are over capacity")

// add writes one add to the log.
func (e *eventual) add(ctx context.Context, ns counters.Namespace, name string, delta int64, token string, at time.Time) error {
	ev := schemas.CounterEvent{Namespace: ns.Name, Generation: ns.Generation, Name: name, Delta: delta, Token: token, TS: at.UnixMilli(),
		Window: ns.IdempotencyWindow.Milliseconds(), Retention: int64(ns.Retention / time.Second)}
	pctx, cancel := context.WithTimeout(ctx, e.produceTimeout)
	defer cancel()
	rec := &kgo.Record{Topic: schemas.TopicCounterEvents, Key: schemas.CounterKey(ns.Name, name), Value: schemas.AppendCounterEvent(nil, ev)}
	if err := e.producer.ProduceSync(pctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("write add of %s/%s to the log: %w", ns.Name, name, err)
	}
	return nil
}

// get sums the counted adds of names in ns, in order.
func (e *eventual) get(ctx context.Context, ns counters.Namespace, names []string) ([]int64, error) {
	t := time.NewTimer(readWait)
	defer t.Stop()
	select {
	case e.reads <- struct{}{}:
		defer func() { <-e.reads }()
	case <-t.C:
		return nil, errBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rows, err := e.conn.Query(ctx, `SELECT name, sum(delta) FROM counter_deltas WHERE ns = ? AND generation = ? AND name IN (?) GROUP BY name`,
		ns.Name, ns.Generation, names)
	if err != nil {
		return nil, fmt.Errorf("read counters of %s: %w", ns.Name, err)
	}
	defer rows.Close()
	sums := make(map[string]int64, len(names))
	for rows.Next() {
		var name string
		var s int64
		if err := rows.Scan(&name, &s); err != nil {
			return nil, fmt.Errorf("scan counter of %s: %w", ns.Name, err)
		}
		sums[name] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read counters of %s: %w", ns.Name, err)
	}
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = sums[n]
	}
	return out, nil
}
