package tracker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
)

var t0 = time.Unix(1_796_000_000, 0)

func batch(kind schemas.CountKind, part int32, epoch uint64, end int64, counts ...schemas.BucketCount) []schemas.Counted {
	return schemas.CountedRecords(kind, schemas.BatchID{Partition: part, Epoch: epoch, Start: end - 10, End: end}, counts)
}

func top1m(t *testing.T, tr *Tracker, kind schemas.CountKind) []schemas.TopEntry {
	t.Helper()
	ls, err := tr.Lists(kind, 10, t0)
	if err != nil {
		t.Fatal(err)
	}
	return ls[0].Entries
}

// TestGuardAppliesEachChunkOnce replays what the aggregator can publish after crashes: the same
// batch twice, a batch cut short and published again whole, an older epoch after a newer one.
func TestGuardAppliesEachChunkOnce(t *testing.T) {
	sec := t0.Unix() - 30
	c := func(key string, n uint64) schemas.BucketCount {
		return schemas.BucketCount{Key: key, Second: sec, Count: n}
	}
	many := make([]schemas.BucketCount, schemas.MaxCountedChunk+1)
	for i := range many {
		many[i] = c(fmt.Sprintf("k%05d", i), 1)
	}
	twoChunks := batch(schemas.CountItems, 0, 1, 40, many...)
	tests := []struct {
		name string
		recs []schemas.Counted
		want []bool // applied, per record
		a    uint64 // count of key "a" in the 1m list
	}{
		{"twice", append(batch(schemas.CountItems, 0, 1, 10, c("a", 3)), batch(schemas.CountItems, 0, 1, 10, c("a", 3))...), []bool{true, false}, 3},
		{"two partitions", append(batch(schemas.CountItems, 0, 1, 10, c("a", 3)), batch(schemas.CountItems, 1, 1, 10, c("a", 3))...), []bool{true, true}, 6},
		{"kinds apart", append(batch(schemas.CountItems, 0, 1, 10, c("a", 3)), batch(schemas.CountAds, 0, 1, 10, c("a", 3))...), []bool{true, true}, 3},
		{"cut short", append([]schemas.Counted{twoChunks[0]}, twoChunks...), []bool{true, false, true}, 0},
		{"newer epoch", append(batch(schemas.CountItems, 0, 1, 10, c("a", 3)), batch(schemas.CountItems, 0, 2, 10, c("a", 4))...), []bool{true, true}, 7},
		{"older epoch", append(batch(schemas.CountItems, 0, 2, 10, c("a", 3)), batch(schemas.CountItems, 0, 1, 20, c("a", 4))...), []bool{true, false}, 3},
		{"earlier end", append(batch(schemas.CountItems, 0, 1, 20, c("a", 3)), batch(schemas.CountItems, 0, 1, 10, c("a", 4))...), []bool{true, false}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(Options{Shards: 4, Counters: 64}, t0)
			var got []bool
			for i, r := range tt.recs {
				got = append(got, tr.Apply(0, int64(i), r))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got applied %v; want %v", got, tt.want)
			}
			var a uint64
			for _, e := range top1m(t, tr, schemas.CountItems) {
				if e.Key == "a" {
					a = e.Count
				}
			}
			if a != tt.a {
				t.Errorf("got a=%d; want %d", a, tt.a)
			}
		})
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	tr := New(Options{Shards: 4, Counters: 32}, t0)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 300 {
		var counts []schemas.BucketCount
		seen := map[string]bool{}
		for range 20 {
			k := fmt.Sprintf("k%d", rng.IntN(200))
			sec := t0.Unix() - rng.Int64N(30*3600)
			if seen[fmt.Sprint(k, sec)] {
				continue
			}
			seen[fmt.Sprint(k, sec)] = true
			counts = append(counts, schemas.BucketCount{Key: k, Second: sec, Count: uint64(1 + rng.IntN(9))})
		}
		kind := schemas.CountKinds[i%2]
		for _, r := range batch(kind, int32(i%3), 1, int64(10+i*10), counts...) {
			tr.Apply(int32(i%3), int64(i), r)
		}
	}
	path := filepath.Join(t.TempDir(), "snap")
	if err := tr.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, Options{Shards: 7, Counters: 32}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Offsets(), tr.Offsets()) || !reflect.DeepEqual(got.guards, tr.guards) {
		t.Errorf("got offsets %v guards %v; want %v %v", got.Offsets(), got.guards, tr.Offsets(), tr.guards)
	}
	for _, k := range schemas.CountKinds {
		a, _ := tr.Lists(k, 50, t0)
		b, _ := got.Lists(k, 50, t0)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: got lists %v; want %v", k, b, a)
		}
	}

	t.Run("damaged", func(t *testing.T) {
		b, _ := os.ReadFile(path)
		for _, at := range []int{len(b) / 2, len(b) - 1, 3} {
			bad := append([]byte(nil), b...)
			bad[at] ^= 0x10
			p := filepath.Join(t.TempDir(), "bad")
			os.WriteFile(p, bad, 0o600)
			if _, err := Load(p, Options{Shards: 1, Counters: 32}, t0); err == nil {
				t.Errorf("flipped byte %d: got no error; want one", at)
			}
		}
		p := filepath.Join(t.TempDir(), "short")
		os.WriteFile(p, b[:len(b)-2], 0o600)
		if _, err := Load(p, Options{Shards: 1, Counters: 32}, t0); err == nil || !strings.Contains(err.Error(), "checksum") {
			t.Errorf("truncated: got %v; want a checksum error", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		got, err := Load(filepath.Join(t.TempDir(), "none"), Options{Shards: 1, Counters: 8}, t0)
		if got != nil || err != nil {
			t.Errorf("got %v, %v; want nil, nil", got, err)
		}
	})
}

// TestLateEventsDropped: an event whose bucket left the exact windows is dropped by them once
// (not once per window) but counted by the 24h list while its hour is in it; one older than
// that (or too far ahead) is counted by no list, and said so apart.
func TestLateEventsDropped(t *testing.T) {
	tests := []struct {
		name                string
		age                 time.Duration // before t0
		dropped, dayDropped uint64
		inDay               bool
	}{
		{"in the last minute", 30 * time.Second, 0, 0, true},
		{"half an hour late: the 1h window takes it", 30 * time.Minute, 0, 0, true},
		{"two hours late", 2 * time.Hour, 5, 0, true},
		{"two days late", 48 * time.Hour, 5, 5, false},
		{"a day ahead", -24 * time.Hour, 5, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(Options{Shards: 4, Counters: 64}, t0)
			c := schemas.BucketCount{Key: "late", Second: t0.Add(-tt.age).Unix(), Count: 5}
			if !tr.Apply(0, 0, batch(schemas.CountItems, 0, 1, 10, c)[0]) {
				t.Fatal("got the chunk refused; want it applied")
			}
			st := tr.Stats()
			if st.Dropped != tt.dropped || st.DayDropped != tt.dayDropped {
				t.Errorf("got dropped %d by the exact windows and %d by the 24h one; want %d and %d", st.Dropped, st.DayDropped, tt.dropped, tt.dayDropped)
			}
			ls, err := tr.Lists(schemas.CountItems, 10, t0)
			if err != nil {
				t.Fatal(err)
			}
			day := ls[len(ls)-1]
			inDay := len(day.Entries) == 1 && day.Entries[0].Key == "late" && day.Entries[0].Count == 5
			if inDay != tt.inDay {
				t.Errorf("got %s list %+v; want the event in it: %v", day.Window, day.Entries, tt.inDay)
			}
		})
	}
}
