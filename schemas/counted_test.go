package schemas

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const sec = 1796039940

func TestCountedRoundTrip(t *testing.T) {
	many := make([]BucketCount, MaxCountedChunk+3)
	for i := range many {
		many[i] = BucketCount{Key: fmt.Sprintf("k%06d", len(many)-i), Second: sec + int64(i%7), Count: uint64(i + 1)}
	}
	tests := []struct {
		name       string
		kind       CountKind
		counts     []BucketCount
		wantChunks int
	}{
		{"empty batch", CountItems, nil, 1},
		{"one", CountAds, []BucketCount{{"ad-1", sec, 3}}, 1},
		{"unsorted in", CountItems, []BucketCount{{"b", sec, 1}, {"a", sec + 1, 2}, {"a", sec, 5}}, 1},
		{"two chunks", CountItems, many, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := BatchID{Partition: 3, Epoch: 7, Start: 100, End: 250}
			recs := CountedRecords(tt.kind, b, slices.Clone(tt.counts))
			if len(recs) != tt.wantChunks {
				t.Fatalf("got %d chunks; want %d", len(recs), tt.wantChunks)
			}
			var all []BucketCount
			for i, r := range recs {
				got, err := DecodeCounted(AppendCounted(nil, r))
				if err != nil {
					t.Fatalf("decode chunk %d: %v", i, err)
				}
				if got.Kind != tt.kind || got.Batch != b || got.Chunk != uint32(i) || got.Chunks != uint32(len(recs)) {
					t.Errorf("got header %+v chunk %d/%d; want %+v chunk %d/%d", got.Batch, got.Chunk, got.Chunks, b, i, len(recs))
				}
				all = append(all, got.Counts...)
			}
			want := slices.Clone(tt.counts)
			SortCounts(want)
			if len(want) == 0 {
				want = nil
			}
			if !reflect.DeepEqual(all, want) {
				t.Errorf("got counts %v; want %v", head(all), head(want))
			}
		})
	}
}

func head(c []BucketCount) []BucketCount { return c[:min(len(c), 4)] }

func TestCountedRejects(t *testing.T) {
	rec := func(mod func(*Counted)) []byte {
		c := Counted{Kind: CountItems, Batch: BatchID{1, 2, 10, 20}, Chunks: 1, Counts: []BucketCount{{"a", sec, 1}, {"b", sec, 2}}}
		mod(&c)
		return AppendCounted(nil, c)
	}
	good := rec(func(*Counted) {})
	tests := []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"empty", nil, "truncated"},
		{"a view", AppendView(nil, View{"i", "v", "", sec * 1000}), "is a view"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"trailing", append(append([]byte{}, good...), 0), "1 bytes after the message"},
		{"kind", rec(func(c *Counted) { c.Kind = 9 }), "unknown count kind"},
		{"range", rec(func(c *Counted) { c.Batch.Start = 30 }), "not a range"},
		{"chunk", rec(func(c *Counted) { c.Chunk = 1 }), "chunk 1 of 1"},
		{"no chunks", rec(func(c *Counted) { c.Chunks = 0 }), "chunk 0 of 0"},
		{"zero count", rec(func(c *Counted) { c.Counts[1].Count = 0 }), "zero count"},
		{"bad key", rec(func(c *Counted) { c.Counts[1].Key = "a b" }), "key: has character"},
		{"empty key", rec(func(c *Counted) { c.Counts[0].Key = "" }), "key: is required"},
		{"order", rec(func(c *Counted) { c.Counts[0].Key = "c" }), "is not after"},
		{"repeat", rec(func(c *Counted) { c.Counts[1] = c.Counts[0] }), "is not after"},
		{"year 2100", rec(func(c *Counted) { c.Counts[1].Second = MaxEventTS / 1000 }), "second out of range"},
		{"varint overflow", rawRecord(KindCounted, []byte{1 << 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), "overflow"},
		{"too many counts", rec(func(c *Counted) {
			c.Counts = make([]BucketCount, MaxCountedChunk+1)
			for i := range c.Counts {
				c.Counts[i] = BucketCount{Key: "k", Second: sec + int64(i), Count: 1}
			}
		}), "more than 5000 counts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCounted(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v; want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// FuzzDecodeCounted checks that no input panics the decoder, and that whatever it accepts
// encodes back to the same bytes (so a record has one meaning).
func FuzzDecodeCounted(f *testing.F) {
	f.Add(AppendCounted(nil, Counted{Kind: CountAds, Batch: BatchID{0, 1, 0, 5}, Chunks: 1, Counts: []BucketCount{{"ad", sec, 4}}}))
	f.Add(AppendCounted(nil, Counted{Kind: CountItems, Batch: BatchID{7, 0, 5, 5}, Chunk: 1, Chunks: 2}))
	f.Add([]byte{wireV1, byte(KindCounted), 1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCounted(b)
		if err != nil {
			return
		}
		if again := AppendCounted(nil, c); string(again) != string(b) {
			// Varints have one canonical form per value; a longer one decodes the same.
			c2, err := DecodeCounted(again)
			if err != nil || !reflect.DeepEqual(c, c2) {
				t.Fatalf("re-encoded record decodes to %+v, %v; want %+v", c2, err, c)
			}
		}
	})
}
