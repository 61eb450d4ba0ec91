package schemas

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// The counted topic: what the aggregators counted, after their dedupe rules, published once a
// batch is durable, so that downstream rankers (topk) use the system's own numbers and never
// deduplicate a second time.
//
// A record is one chunk of one batch. The record lands in the counted partition numbered like
// the batch's source partition, so the chunks of one source partition keep their log order, and
// its key is "<kind>/<partition>". A batch is identified by (kind, source partition, epoch,
// end offset): the epoch is the aggregator's claim on the partition, the offsets are the source
// records the batch covers, [Start, End). Its counts are sorted by (key, second) and cut into
// chunks of at most MaxCountedChunk, so a batch published again (after a crash between its
// durable write and its publish) is cut into the same chunks; a reader applies chunk c of batch
// (epoch, end) iff (epoch, end, c) is past the last chunk it applied for that source partition.

// CountKind says what a counted batch counts.
type CountKind uint8

const (
	// CountItems are item views after the 30-minute viewer rule.
	CountItems CountKind = 1
	// CountAds are ad clicks after the click_id rule.
	CountAds CountKind = 2
)

// CountKinds lists every kind, in a fixed order.
var CountKinds = [...]CountKind{CountItems, CountAds}

func (k CountKind) String() string {
	switch k {
	case CountItems:
		return "items"
	case CountAds:
		return "ads"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseCountKind reads "items" or "ads".
func ParseCountKind(s string) (CountKind, error) {
	switch s {
	case "items":
		return CountItems, nil
	case "ads":
		return CountAds, nil
	}
	return 0, fmt.Errorf("unknown kind %q; want items or ads", s)
}

// MaxCountedChunk bounds the counts in one record: at most MaxIDLen+21 bytes each, a record
// stays under 1 MB, Kafka's default record size limit.
const MaxCountedChunk = 5000

// BatchID identifies a batch of one source partition.
type BatchID struct {
	Partition int32
	Epoch     uint64
	Start     int64 // first source offset of the batch
	End       int64 // source offset after the batch: the writer's checkpoint
}

// BucketCount is how many of key's events of one event-time second a batch counted.
type BucketCount struct {
	Key    string
	Second int64 // Unix seconds, event time
	Count  uint64
}

// Counted is one record of the counted topic.
type Counted struct {
	Kind   CountKind
	Batch  BatchID
	Chunk  uint32 // 0-based
	Chunks uint32 // chunks of the batch
	Counts []BucketCount
}

// CountedKey is the Kafka key of kind's records from source partition p.
func CountedKey(kind CountKind, p int32) string { return fmt.Sprintf("%s/%d", kind, p) }

// SortCounts puts counts in the order records carry them: by key, then second.
func SortCounts(counts []BucketCount) {
	slices.SortFunc(counts, func(a, b BucketCount) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Second, b.Second)
	})
}

// CountedRecords sorts counts and cuts them into the records of batch b. Each (key, second)
// must occur once. A batch with no counts is one record with none, so a reader still learns
// that the batch happened.
func CountedRecords(kind CountKind, b BatchID, counts []BucketCount) []Counted {
	SortCounts(counts)
	n := max(1, (len(counts)+MaxCountedChunk-1)/MaxCountedChunk)
	out := make([]Counted, n)
	for i := range out {
		out[i] = Counted{Kind: kind, Batch: b, Chunk: uint32(i), Chunks: uint32(n),
			Counts: counts[i*MaxCountedChunk : min(len(counts), (i+1)*MaxCountedChunk)]}
	}
	return out
}

// minEventSecond is MinEventTS in seconds.
const minEventSecond = MinEventTS / 1000

// sizeCount is the encoded size of one BucketCount message.
func sizeCount(e BucketCount) int {
	return sizeString(e.Key) + sizeVarint(uint64(e.Second)) + sizeVarint(e.Count)
}

// AppendCounted appends c's wire encoding to dst.
func AppendCounted(dst []byte, c Counted) []byte {
	size := sizeVarint(uint64(c.Kind)) + sizeVarint(uint64(int64(c.Batch.Partition))) + sizeVarint(c.Batch.Epoch) +
		sizeVarint(uint64(c.Batch.Start)) + sizeVarint(uint64(c.Batch.End)) + sizeVarint(uint64(c.Chunk)) + sizeVarint(uint64(c.Chunks))
	for _, e := range c.Counts {
		size += 1 + protowire.SizeBytes(sizeCount(e))
	}
	dst = appendMessageHeader(dst, protowire.Number(KindCounted), size)
	dst = appendVarint(dst, 1, uint64(c.Kind))
	dst = appendVarint(dst, 2, uint64(int64(c.Batch.Partition)))
	dst = appendVarint(dst, 3, c.Batch.Epoch)
	dst = appendVarint(dst, 4, uint64(c.Batch.Start))
	dst = appendVarint(dst, 5, uint64(c.Batch.End))
	dst = appendVarint(dst, 6, uint64(c.Chunk))
	dst = appendVarint(dst, 7, uint64(c.Chunks))
	for _, e := range c.Counts {
		dst = appendMessageHeader(dst, 8, sizeCount(e))
		dst = appendString(dst, 1, e.Key)
		dst = appendVarint(dst, 2, uint64(e.Second))
		dst = appendVarint(dst, 3, e.Count)
	}
	return dst
}

// DecodeCounted reads and validates a counted record (check says what is checked).
func DecodeCounted(b []byte) (Counted, error) {
	if isV1(b) {
		return decodeCountedV1(b)
	}
	r, err := openRecord(b, KindCounted)
	if err != nil {
		return Counted{}, err
	}
	var c Counted
	for r.next() {
		switch r.num {
		case 1:
			c.Kind = CountKind(r.small(math.MaxUint8))
		case 2:
			c.Batch.Partition = int32(r.varint()) // an int32 is sign-extended to 64 bits
		case 3:
			c.Batch.Epoch = r.varint()
		case 4:
			c.Batch.Start = int64(r.varint())
		case 5:
			c.Batch.End = int64(r.varint())
		case 6:
			c.Chunk = uint32(r.small(math.MaxUint32))
		case 7:
			c.Chunks = uint32(r.small(math.MaxUint32))
		case 8:
			if len(c.Counts) == MaxCountedChunk {
				r.err = fmt.Errorf("more than %d counts", MaxCountedChunk)
				break
			}
			c.Counts = append(c.Counts, decodeCount(r.message(), &r.err))
		default:
			r.skip()
		}
	}
	return c, finish(&r, c.check)
}

// decodeCount reads one BucketCount message; a failure goes to *err.
func decodeCount(r pbReader, err *error) BucketCount {
	var e BucketCount
	for r.next() {
		switch r.num {
		case 1:
			e.Key = r.string()
		case 2:
			e.Second = int64(r.varint())
		case 3:
			e.Count = r.varint()
		default:
			r.skip()
		}
	}
	if r.err != nil && *err == nil {
		*err = r.err
	}
	return e
}

// check validates everything a reader of a counted record relies on, since anyone able to
// write to the topic can put bytes there: a known kind, a sane batch identity, keys that pass
// CheckID, seconds in the event-time range, positive counts, and counts in strictly increasing
// (key, second) order (so no pair repeats and a batch's chunks are the same on every publish).
func (c Counted) check() error {
	switch {
	case c.Kind != CountItems && c.Kind != CountAds:
		return fmt.Errorf("unknown count kind %d", uint8(c.Kind))
	case c.Batch.Partition < 0:
		return fmt.Errorf("partition %d out of range", c.Batch.Partition)
	case c.Batch.Start < 0 || c.Batch.End < c.Batch.Start:
		return fmt.Errorf("offsets [%d, %d) are not a range", c.Batch.Start, c.Batch.End)
	case c.Chunks < 1 || c.Chunk >= c.Chunks:
		return fmt.Errorf("chunk %d of %d", c.Chunk, c.Chunks)
	case len(c.Counts) > MaxCountedChunk:
		return fmt.Errorf("%d counts; want at most %d", len(c.Counts), MaxCountedChunk)
	}
	for i, e := range c.Counts {
		if err := CheckID("key", e.Key, true); err != nil {
			return fmt.Errorf("count %d: %w", i, err)
		}
		if e.Second < minEventSecond || e.Second >= MaxEventTS/1000 {
			return fmt.Errorf("count %d: second out of range", i)
		}
		if e.Count == 0 {
			return fmt.Errorf("count %d: zero count", i)
		}
		if i > 0 {
			prev := c.Counts[i-1]
			if prev.Key > e.Key || prev.Key == e.Key && prev.Second >= e.Second {
				return fmt.Errorf("count %d: (%q, %d) is not after (%q, %d)", i, e.Key, e.Second, prev.Key, prev.Second)
			}
		}
	}
	return nil
}
