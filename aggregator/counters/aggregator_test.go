package counters

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

func openMigrated(t *testing.T, ctx context.Context, db string) driver.Conn {
	t.Helper()
	conn := infra.DB(t, ctx, db)
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	return conn
}

var base = testinfra.RecentNoon()

// distinctMembers is how many distinct members logOf adds: few enough that uniqCombined64 counts
// them exactly.
const distinctMembers = 40

var testCfg = Config{FlushInterval: time.Second, MaxBatch: 1000, CheckInterval: 0, Owner: "test"}

func newAgg(conn driver.Conn) *Aggregator {
	return New(testCfg, conn, func() time.Time { return base.Add(time.Hour) }, infra.Logger, prometheus.NewRegistry())
}

// logOf builds a partition's log of adds to a few counters of two namespaces with different
// windows, and now and then a clear: every op is sent one to three times with its token (a
// client's retries, at later times within the window), and one token is sent again past its
// window (it counts again). It returns the records and, per counter, the exact value the rule
// gives: the sum of the adds after its last clear.
func logOf(rng *rand.Rand, n int) ([][]byte, map[string]int64) {
	var log [][]byte
	want := map[string]int64{}
	op := func(kind, ns string, window int64, name string, delta int64, token string, ts int64) {
		log = append(log, schemas.AppendCounterEvent(nil, schemas.CounterEvent{Op: kind, Namespace: ns, Generation: 1, Name: name, Delta: delta,
			Token: token, TS: ts, Window: window, Retention: 90 * 86400}))
	}
	add := func(ns string, window int64, name string, delta int64, token string, ts int64) {
		op(schemas.CounterAdd, ns, window, name, delta, token, ts)
	}
	t0 := base.UnixMilli()
	for i := range n {
		ns, window := "shares", int64(time.Hour/time.Millisecond)
		if i%3 == 0 {
			ns, window = "plays", int64(time.Minute/time.Millisecond)
		}
		name := fmt.Sprintf("c%d", rng.IntN(4))
		delta := int64(rng.IntN(21) - 5)
		ts := t0 + int64(i)*100
		kind := schemas.CounterAdd
		if rng.IntN(25) == 0 {
			kind, want[ns+"/"+name] = schemas.CounterClear, 0
		} else {
			want[ns+"/"+name] += delta
		}
		for r := range 1 + rng.IntN(3) {
			op(kind, ns, window, name, delta, fmt.Sprintf("t%d", i), ts+int64(r)*50)
		}
	}
	// Distinct members of one counter, each sent twice: the sketch holds each once.
	for i := range distinctMembers {
		for range 2 {
			log = append(log, schemas.AppendCounterEvent(nil, schemas.CounterEvent{Op: schemas.CounterDistinct, Namespace: "shares", Generation: 1,
				Name: "c0", Member: fmt.Sprintf("m%d", i), TS: t0 + int64(i), Window: 3_600_000, Retention: 90 * 86400}))
		}
	}
	// Past its window (a minute) the same token counts again.
	add("plays", 60_000, "late", 7, "once", t0+int64(n)*100)
	add("plays", 60_000, "late", 7, "once", t0+int64(n)*100+2*60_000)
	want["plays/late"] += 14
	log = append(log, []byte("not json"))                                 // set aside
	maps.DeleteFunc(want, func(_ string, v int64) bool { return v == 0 }) // as sums reads them
	return log, want
}

func records(from int, values [][]byte) []*kgo.Record {
	out := make([]*kgo.Record, len(values))
	for i, v := range values {
		out[i] = &kgo.Record{Offset: int64(from + i), Value: v}
	}
	return out
}

// sums reads every counter's total, as the collector does.
func sums(t *testing.T, ctx context.Context, conn driver.Conn) map[string]int64 {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT ns, name, sum(delta) FROM counter_deltas WHERE ns != '' GROUP BY ns, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var ns, name string
		var s int64
		if err := rows.Scan(&ns, &name, &s); err != nil {
			t.Fatal(err)
		}
		if s != 0 {
			out[ns+"/"+name] = s
		}
	}
	return out
}

// An aggregator that dies at random moments (between flushes, its pending batch lost) and is
// replaced by one that claims the partition and replays from the checkpoint ends with every
// counter exactly the rule's sum: no retried token counted twice, none lost.
func TestCountsExactThroughCrashes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			conn := openMigrated(t, ctx, fmt.Sprintf("counters_crash_test_%d", seed))
			rng := rand.New(rand.NewPCG(seed, 7))
			log, want := logOf(rng, 400)
			for round := 0; ; round++ {
				a := newAgg(conn)
				r, err := a.Assign(ctx, []int32{0})
				if err != nil {
					t.Fatal(err)
				}
				at := int(r.At[schemas.TopicCounterEvents][0])
				last := round == 4
				end := len(log)
				if !last {
					end = at + rng.IntN(len(log)-at+1)
				}
				for i := at; i < end; {
					j := min(end, i+1+rng.IntN(30))
					a.Process(schemas.TopicCounterEvents, 0, records(i, log[i:j]))
					i = j
					if rng.IntN(3) == 0 {
						if _, err := a.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if last {
					if _, err := a.FlushAll(ctx); err != nil {
						t.Fatal(err)
					}
					break
				}
				// Crash: a is dropped with whatever it had not flushed.
			}
			if got := sums(t, ctx, conn); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got %v; want %v", got, want)
			}
			var letters uint64
			if err := conn.QueryRow(ctx, `SELECT count() FROM dead_letters FINAL WHERE source = 'counter_events'`).Scan(&letters); err != nil {
				t.Fatal(err)
			}
			if letters != 1 {
				t.Errorf("got %d dead letters; want 1 (the record that is not JSON)", letters)
			}
			var members uint64
			if err := conn.QueryRow(ctx, `SELECT uniqCombined64Merge(members) FROM counter_distinct WHERE ns = 'shares' AND name = 'c0'`).Scan(&members); err != nil {
				t.Fatal(err)
			}
			if members != distinctMembers {
				t.Errorf("got %d distinct members; want %d", members, distinctMembers)
			}
		})
	}
}

// A partition's first claim resumes where Kafka's committed offset says; a later claim that
// finds no checkpoint (the first owner's batch had not landed when it read: beyond the claim's
// start, that batch is undone) resumes at its start, 0, never where the first owner's commit to
// Kafka may have moved the group's offset since.
func TestClaimWithoutCheckpointResumesAtItsStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "counters_no_checkpoint_test")
	log, _ := logOf(rand.New(rand.NewPCG(5, 5)), 60)
	first := newAgg(conn)
	r, err := first.Assign(ctx, []int32{4})
	if at, ok := r.At[schemas.TopicCounterEvents][4]; err != nil || ok {
		t.Fatalf("first claim: got resume at %d (%v), %v; want none (kafka's committed offset)", at, ok, err)
	}
	first.Process(schemas.TopicCounterEvents, 4, records(0, log))
	r, err = newAgg(conn).Assign(ctx, []int32{4})
	if at, ok := r.At[schemas.TopicCounterEvents][4]; err != nil || !ok || at != 0 {
		t.Fatalf("second claim without a checkpoint: got resume at %d (%v), %v; want 0", at, ok, err)
	}
}

// A partition idle past markerTTL has no marker left while its counters' rows live on: the next
// claim resumes after the last batch with rows left, and keeps those rows, rather than starting
// at 0 and deleting them as a zombie's.
func TestClaimAfterTheMarkersExpiredKeepsTheCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "counters_markers_expired_test")
	log, want := logOf(rand.New(rand.NewPCG(6, 6)), 120)
	first := newAgg(conn)
	if _, err := first.Assign(ctx, []int32{5}); err != nil {
		t.Fatal(err)
	}
	first.Process(schemas.TopicCounterEvents, 5, records(0, log))
	if _, err := first.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	// The markers' TTL passes (the counters' own rows are kept their namespace's retention).
	if err := conn.Exec(ctx, `ALTER TABLE counter_deltas DELETE WHERE ns = '' SETTINGS mutations_sync = 2`); err != nil {
		t.Fatal(err)
	}
	r, err := newAgg(conn).Assign(ctx, []int32{5})
	if at := r.At[schemas.TopicCounterEvents][5]; err != nil || at != int64(len(log)) {
		t.Fatalf("claim without a marker: got resume at %d, %v; want %d, after the last batch with rows", at, err, len(log))
	}
	if got := sums(t, ctx, conn); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v; want %v", got, want)
	}
}

// A displaced owner (a zombie that stalled past the session timeout) cannot add its batch: the
// new owner's claim fences it, and its rows never reach counter_deltas; the new owner counts the
// same records once.
func TestZombieBatchIsFenced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "counters_zombie_test")
	log, want := logOf(rand.New(rand.NewPCG(9, 9)), 200)
	old := newAgg(conn)
	if _, err := old.Assign(ctx, []int32{3}); err != nil {
		t.Fatal(err)
	}
	old.Process(schemas.TopicCounterEvents, 3, records(0, log[:100]))
	if _, err := old.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	old.Process(schemas.TopicCounterEvents, 3, records(100, log[100:150]))
	owner := newAgg(conn)
	r, err := owner.Assign(ctx, []int32{3})
	if err != nil {
		t.Fatal(err)
	}
	if at := r.At[schemas.TopicCounterEvents][3]; at != 100 {
		t.Fatalf("got the new owner resuming at %d; want 100, the old owner's checkpoint", at)
	}
	// The zombie writes past its fence check: straight into the fenced insert.
	p := old.Held(nil)[0]
	p.next = 150
	if err := old.store.writeDeltas(ctx, []*partition{p}, base); err != nil {
		t.Fatal(err)
	}
	if landed, err := old.deltas.Written(ctx, 3, p.epoch, 150); err != nil || landed {
		t.Errorf("got the zombie's batch stored (%v, %v); want it dropped by the claims fence", landed, err)
	}
	if _, err := old.Flush(ctx); err != nil { // its own flush finds the newer claim and drops the partition
		t.Fatal(err)
	}
	if len(old.Held(nil)) != 0 {
		t.Error("got the zombie still holding the partition after its flush; want it dropped")
	}
	owner.Process(schemas.TopicCounterEvents, 3, records(100, log[100:]))
	if _, err := owner.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sums(t, ctx, conn); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v; want %v", got, want)
	}
}
