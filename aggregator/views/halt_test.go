package views

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// A checkpoint the log no longer fits halts its partition instead of counting wrong: the log
// re-created below the checkpoint (new records would look counted) and retention past it
// (records deleted uncounted). Each halt is reported (readiness, gauge, partition_halts) until
// an operator decides, and then counting goes on exactly as the decision stated.
func TestCheckpointOutsideTheLogHaltsThePartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tests := []struct {
		name      string
		fault     func(t *testing.T, h *haltRig)
		wrongFrom halt.Resume
		from      halt.Resume
		wantErr   string
		left      int // the records produced after the checkpoint that the decision counts
	}{
		{"topic re-created below the checkpoint", func(t *testing.T, h *haltRig) {
			adm := kadm.NewClient(h.prod)
			if _, err := adm.DeleteTopics(ctx, schemas.TopicViews); err != nil {
				t.Fatal(err)
			}
			h.prod = infra.Producer(t, schemas.TopicViews, 2) // a client that knows the new topic's id
			h.produce(t, ctx, 3)                              // offsets 0-2, below the checkpoint 10
		}, halt.FromStart, halt.FromCheckpoint, "beyond the log's end", 0},
		{"retention past the checkpoint", func(t *testing.T, h *haltRig) {
			last := h.produce(t, ctx, 5) // uncounted: the aggregator is down
			adm := kadm.NewClient(h.prod)
			del := kadm.Offsets{}
			del.Add(kadm.Offset{Topic: schemas.TopicViews, Partition: h.partition, At: last - 1})
			if _, err := adm.DeleteRecords(ctx, del); err != nil {
				t.Fatal(err)
			}
		}, halt.FromCheckpoint, halt.FromStart, "before the log's start", 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHaltRig(t, ctx, i)
			first := h.start(t)
			h.produce(t, ctx, 10)
			h.waitCounted(t, 10)
			stop(t, first)
			checkpoint := h.end(t, ctx)
			tt.fault(t, h)

			second := h.start(t)
			defer stop(t, second)
			// Other tests' records are in the topic too: every partition this group counted
			// can halt. The rig's item's partition must.
			mine := fmt.Sprintf("partition %s/%d halted: ", schemas.TopicViews, h.partition)
			testinfra.WaitFor(t, 30*time.Second, "the partition halted", func() (bool, string) {
				err := second.Check(ctx)
				return err != nil && strings.Contains(err.Error(), mine+"its checkpoint") && strings.Contains(err.Error(), tt.wantErr), fmt.Sprint(err)
			})
			if got := h.halted(t); got < 1 {
				t.Errorf("got tally_aggregator_partitions_halted %v; want 1 for each halted partition", got)
			}
			time.Sleep(time.Second)
			if got := h.views(t); got != 10 {
				t.Errorf("got %d views counted while halted; want 10", got)
			}
			store := halt.Store{Conn: h.conn}
			var out bytes.Buffer
			wrong := halt.Args{Topic: schemas.TopicViews, Partition: h.partition, Decide: true, From: tt.wrongFrom, By: "test"}
			if err := halt.Run(ctx, store, wrong, time.Now(), &out); err == nil {
				t.Errorf("got the decision to resume from %s taken; want it refused", tt.wrongFrom)
			}
			open, err := store.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range open {
				args := halt.Args{Topic: o.Topic, Partition: o.Partition, Decide: true, From: tt.from, By: "test"}
				if err := halt.Run(ctx, store, args, time.Now(), &out); err != nil {
					t.Fatal(err)
				}
			}
			testinfra.WaitFor(t, 30*time.Second, "the partition resumed", func() (bool, string) {
				err := second.Check(ctx)
				return err == nil, fmt.Sprint(err)
			})
			// The records below the checkpoint are skipped as decided; the next two count.
			h.produce(t, ctx, int(max(0, checkpoint-h.end(t, ctx)))+2)
			want := 10 + tt.left + 2
			h.waitCounted(t, want)
			time.Sleep(time.Second)
			if got := h.views(t); got != uint64(want) {
				t.Errorf("got %d views; want %d (%s)", got, want, out.String())
			}
			if got := h.halted(t); got != 0 {
				t.Errorf("got tally_aggregator_partitions_halted %v after the decision; want none", got)
			}
		})
	}
}

// haltRig is one test's database, group, item and partition.
type haltRig struct {
	conn      driver.Conn
	group     string
	item      string
	prod      *kgo.Client
	partition int32
	viewer    int
	reg       *prometheus.Registry
}

// end is the rig's partition's end offset.
func (h *haltRig) end(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	ends, err := kadm.NewClient(h.prod).ListEndOffsets(ctx, schemas.TopicViews)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(schemas.TopicViews, h.partition)
	return o.Offset
}

func newHaltRig(t *testing.T, ctx context.Context, i int) *haltRig {
	return &haltRig{conn: openMigrated(t, ctx, fmt.Sprintf("views_halt_test_%d", i)), group: fmt.Sprintf("views-halt-test-%d", i),
		item: fmt.Sprintf("halt-item-%d", i), prod: infra.Producer(t, schemas.TopicViews, 2)}
}

func (h *haltRig) start(t *testing.T) *member.Source {
	t.Helper()
	agg := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: 200 * time.Millisecond, SketchInterval: time.Second,
		MaxBatch: 100000, SketchIdle: time.Minute}, h.conn, time.Now, infra.Logger, prometheus.NewRegistry())
	c := testMember(h.group, h.conn, infra.Logger)
	h.reg = prometheus.NewRegistry()
	c.Registry = h.reg
	src, err := NewSource(c, agg)
	if err != nil {
		t.Fatal(err)
	}
	src.Start()
	return src
}

// produce sends n views of new viewers of the rig's item and returns the last one's offset.
func (h *haltRig) produce(t *testing.T, ctx context.Context, n int) int64 {
	t.Helper()
	var last int64
	for range n {
		h.viewer++
		r := &kgo.Record{Topic: schemas.TopicViews, Key: []byte(h.item), Value: view(h.item, fmt.Sprintf("v%d", h.viewer), time.Now().UnixMilli())}
		if err := h.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		h.partition, last = r.Partition, r.Offset
	}
	return last
}

func (h *haltRig) views(t *testing.T) uint64 {
	t.Helper()
	return queryUint(t, context.Background(), h.conn, "SELECT toUInt64(sum(views)) FROM view_deltas WHERE item_id = ?", h.item)
}

func (h *haltRig) waitCounted(t *testing.T, n int) {
	t.Helper()
	testinfra.WaitFor(t, 30*time.Second, fmt.Sprintf("%d views counted", n), func() (bool, string) {
		got := h.views(t)
		return got >= uint64(n), fmt.Sprintf("%d counted", got)
	})
}

// halted is the gauge's sum over partitions.
func (h *haltRig) halted(t *testing.T) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "tally_aggregator_partitions_halted" {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func stop(t *testing.T, src *member.Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}
