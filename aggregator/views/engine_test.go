package views

import (
	"context"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
)

// testMember is a views group member of the test broker, with conn keeping its halts.
func testMember(group string, conn driver.Conn, logger *slog.Logger) member.Config {
	return member.Config{Group: member.Group{Brokers: []string{infra.Kafka.Addr()}, Name: group, SessionTimeout: 6 * time.Second},
		Poll: 200 * time.Millisecond, Halts: halt.Store{Conn: conn}, Owner: "test", Now: time.Now, Logger: logger, Registry: prometheus.NewRegistry()}
}

// The tests drive the Aggregator through its engine with views-topic shapes: offsets per
// partition rather than per topic.

func assignViews(a *Aggregator, ctx context.Context, ids []int32) (map[int32]int64, error) {
	r, err := a.Assign(ctx, ids)
	return r.At[schemas.TopicViews], err
}

func flushViews(a *Aggregator, ctx context.Context) (map[int32]int64, error) {
	done, err := a.Flush(ctx)
	return done[schemas.TopicViews], err
}

func flushAllViews(a *Aggregator, ctx context.Context) (map[int32]int64, error) {
	done, err := a.FlushAll(ctx)
	return done[schemas.TopicViews], err
}

// processAt hands a the records of partition id at offsets with values.
func processAt(a *Aggregator, id int32, offsets []int64, values [][]byte) {
	recs := make([]*kgo.Record, len(offsets))
	for i, off := range offsets {
		recs[i] = &kgo.Record{Topic: schemas.TopicViews, Partition: id, Offset: off, Value: values[i]}
	}
	a.Process(schemas.TopicViews, id, recs)
}

// heldPart is a's partition id, nil when a does not hold it.
func heldPart(a *Aggregator, id int32) *partition {
	for _, p := range a.Held(map[int32]bool{id: true}) {
		return p
	}
	return nil
}
