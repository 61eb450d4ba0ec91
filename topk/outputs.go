package topk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// Outputs are where lists go; a nil field is skipped.
//   - Redis: one key per kind and window (schemas.TopRedisKey) holding the list as JSON; the
//     collector's GET /v1/top reads it (one GET per request, never ClickHouse).
//   - Kafka: the compacted topk topic, one record per kind and window (schemas.TopKafkaKey), so
//     a consumer reading it from the start ends with the latest list of each.
//   - ClickHouse: topk_snapshots, each list's first HistoryK entries, for dashboards and history.
type Outputs struct {
	Redis      redis.UniversalClient
	Kafka      *kgo.Client
	ClickHouse driver.Conn
	HistoryK   int
}

// EnsureTopKTopic creates the topk topic, compacted, with one partition and d's replication,
// if missing.
func EnsureTopKTopic(ctx context.Context, cl *kgo.Client, d kafka.Durability) error {
	return kafka.CreateTopics(ctx, cl, d, kafka.TopicSpec{Name: schemas.TopicTopK, Partitions: 1, Compact: true})
}

// Publish writes lists to every output and returns the errors by output name.
func (o *Outputs) Publish(ctx context.Context, lists []schemas.TopList) map[string]error {
	errs := map[string]error{}
	bodies := make([][]byte, len(lists))
	for i, l := range lists {
		b, err := json.Marshal(l)
		if err != nil {
			errs["encode"] = fmt.Errorf("encode %s %s list: %w", l.Kind, l.Window, err)
			return errs
		}
		bodies[i] = b
	}
	if o.Redis != nil {
		if err := o.toRedis(ctx, lists, bodies); err != nil {
			errs["redis"] = err
		}
	}
	if o.Kafka != nil {
		if err := o.toKafka(ctx, lists, bodies); err != nil {
			errs["kafka"] = err
		}
	}
	if o.ClickHouse != nil && o.HistoryK > 0 {
		if err := o.toClickHouse(ctx, lists); err != nil {
			errs["clickhouse"] = err
		}
	}
	return errs
}

func kindOf(l schemas.TopList) schemas.CountKind {
	k, _ := schemas.ParseCountKind(l.Kind)
	return k
}

func (o *Outputs) toRedis(ctx context.Context, lists []schemas.TopList, bodies [][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pipe := o.Redis.Pipeline()
	for i, l := range lists {
		pipe.Set(ctx, schemas.TopRedisKey(kindOf(l), l.Window), bodies[i], 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("write %d lists to redis: %w", len(lists), err)
	}
	return nil
}

func (o *Outputs) toKafka(ctx context.Context, lists []schemas.TopList, bodies [][]byte) error {
	recs := make([]*kgo.Record, len(lists))
	for i, l := range lists {
		recs[i] = &kgo.Record{Topic: schemas.TopicTopK, Key: []byte(schemas.TopKafkaKey(kindOf(l), l.Window)), Value: bodies[i]}
	}
	if err := o.Kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("write %d lists to topic %s: %w", len(lists), schemas.TopicTopK, err)
	}
	return nil
}

func (o *Outputs) toClickHouse(ctx context.Context, lists []schemas.TopList) error {
	b, err := o.ClickHouse.PrepareBatch(ctx, "INSERT INTO topk_snapshots (kind, window, computed_at, rank, key, count, exact, error_bound)")
	if err != nil {
		return fmt.Errorf("prepare topk_snapshots insert: %w", err)
	}
	defer b.Abort()
	for _, l := range lists {
		var bound uint64
		if l.ErrorBound != nil {
			bound = *l.ErrorBound
		}
		for _, e := range l.Entries[:min(o.HistoryK, len(l.Entries))] {
			if err := b.Append(l.Kind, l.Window, l.ComputedAt, uint16(e.Rank), e.Key, e.Count, l.Exact, bound); err != nil {
				return fmt.Errorf("append %s %s list: %w", l.Kind, l.Window, err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert into topk_snapshots: %w", err)
	}
	return nil
}
