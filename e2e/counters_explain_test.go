package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
)

// explainCounters says, per partition of counter_events, what the log holds for namespace
// meters (adds counted once per token) beside what counter_deltas holds, with each partition's
// claims and checkpoints: a counter that misses adds shows whether they never reached the log or
// reached it and were not counted, and which batches or owners were involved.
func explainCounters(ctx context.Context, kc kafkaConn, ch chclient.Options) string {
	var b strings.Builder
	logSums, err := counterLogSums(ctx, kc)
	if err != nil {
		fmt.Fprintf(&b, "read the log: %v\n", err)
	}
	conn, err := chclient.Open(ctx, ch)
	if err != nil {
		return b.String() + "open clickhouse: " + err.Error()
	}
	defer conn.Close()
	for _, q := range []string{
		"SELECT partition, name, toString(sum(delta)), toString(count()) FROM counter_deltas WHERE ns = 'meters' GROUP BY partition, name ORDER BY partition, name",
		"SELECT partition, toString(epoch), toString(min(end_offset)), toString(max(end_offset)) FROM counter_deltas WHERE ns = '' GROUP BY partition, epoch ORDER BY partition, epoch",
		"SELECT partition, toString(epoch), toString(start_offset), owner FROM counter_partition_claims ORDER BY partition, epoch",
	} {
		fmt.Fprintf(&b, "%s:\n", q)
		rows, err := conn.Query(ctx, q)
		if err != nil {
			fmt.Fprintf(&b, "  %v\n", err)
			continue
		}
		for rows.Next() {
			var p uint16
			var c1, c2, c3 string
			if err := rows.Scan(&p, &c1, &c2, &c3); err != nil {
				fmt.Fprintf(&b, "  %v\n", err)
				break
			}
			fmt.Fprintf(&b, "  %d %s %s %s\n", p, c1, c2, c3)
		}
		rows.Close()
	}
	fmt.Fprintf(&b, "the log, per partition and counter (adds once per token, from its last clear):\n")
	for _, k := range slices.Sorted(maps.Keys(logSums)) {
		fmt.Fprintf(&b, "  %s %d\n", k, logSums[k])
	}
	return b.String()
}

// counterLogSums reads counter_events from its start to its end and sums namespace meters' adds
// per "partition name", each token once and from the counter's last clear, as the aggregators
// should.
func counterLogSums(ctx context.Context, kc kafkaConn) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := kc.client(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicCounterEvents)
	if err != nil {
		return nil, err
	}
	offsets := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		offsets[o.Partition] = kgo.NewOffset().AtStart()
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{schemas.TopicCounterEvents: offsets})
	sums, seen := map[string]int64{}, map[string]bool{}
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return sums, fmt.Errorf("%v (partitions left: %v)", err, remaining)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(remaining, r.Partition)
			}
			e, err := schemas.DecodeCounterEvent(r.Value)
			if err != nil || e.Namespace != "meters" {
				return
			}
			k := fmt.Sprintf("%d %s", r.Partition, e.Name)
			switch {
			case e.Op == schemas.CounterClear: // at its place in the log (a counter is in one partition)
				sums[k] = 0
			case e.Op != "" && e.Op != schemas.CounterAdd:
			case !seen[k+" "+e.Token]:
				seen[k+" "+e.Token] = true
				sums[k] += e.Delta
			}
		})
	}
	return sums, nil
}
