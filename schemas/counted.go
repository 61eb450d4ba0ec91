package schemas

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
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

const minEventSecond = MinEventTS / 1000

// AppendCounted appends c's wire encoding to dst.
func AppendCounted(dst []byte, c Counted) []byte {
	dst = append(dst, wireVersion, byte(KindCounted), byte(c.Kind))
	dst = binary.AppendUvarint(dst, uint64(c.Batch.Partition))
	dst = binary.AppendUvarint(dst, c.Batch.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Batch.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Batch.End))
	dst = binary.AppendUvarint(dst, uint64(c.Chunk))
	dst = binary.AppendUvarint(dst, uint64(c.Chunks))
	dst = binary.AppendUvarint(dst, uint64(len(c.Counts)))
	for _, e := range c.Counts {
		dst = appendString(dst, e.Key)
		dst = binary.AppendUvarint(dst, uint64(e.Second-minEventSecond))
		dst = binary.AppendUvarint(dst, e.Count)
	}
	return dst
}

// DecodeCounted reads and validates a counted record. Everything a reader relies on is
// checked, since anyone able to write to the topic can put bytes there: a known kind, a sane
// batch identity, keys that pass CheckID, seconds in the event-time range, positive counts,
// and counts in strictly increasing (key, second) order (so no pair repeats and a batch's
// chunks are the same on every publish).
func DecodeCounted(b []byte) (Counted, error) {
	r, err := header(b, KindCounted)
	if err != nil {
		return Counted{}, err
	}
	var c Counted
	c.Kind = CountKind(r.byte())
	part := r.uvarint()
	c.Batch.Epoch = r.uvarint()
	c.Batch.Start = r.int64()
	c.Batch.End = r.int64()
	chunk, chunks, n := r.uvarint(), r.uvarint(), r.uvarint()
	if r.err == nil {
		switch {
		case c.Kind != CountItems && c.Kind != CountAds:
			r.err = fmt.Errorf("unknown count kind %d", uint8(c.Kind))
		case part > math.MaxInt32:
			r.err = fmt.Errorf("partition %d out of range", part)
		case c.Batch.Start < 0 || c.Batch.End < c.Batch.Start:
			r.err = fmt.Errorf("offsets [%d, %d) are not a range", c.Batch.Start, c.Batch.End)
		case chunks < 1 || chunks > math.MaxUint32 || chunk >= chunks:
			r.err = fmt.Errorf("chunk %d of %d", chunk, chunks)
		case n > MaxCountedChunk:
			r.err = fmt.Errorf("%d counts; want at most %d", n, MaxCountedChunk)
		}
	}
	c.Batch.Partition, c.Chunk, c.Chunks = int32(part), uint32(chunk), uint32(chunks)
	if r.err == nil && n > 0 {
		c.Counts = make([]BucketCount, 0, min(n, uint64(len(r.s)/3)+1))
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		e := BucketCount{Key: r.string()}
		sec := r.uvarint()
		e.Count = r.uvarint()
		if r.err != nil {
			break
		}
		if err := CheckID("key", e.Key, true); err != nil {
			r.err = fmt.Errorf("count %d: %w", i, err)
			break
		}
		if sec >= uint64(MaxEventTS/1000-minEventSecond) {
			r.err = fmt.Errorf("count %d: second out of range", i)
			break
		}
		e.Second = int64(sec) + minEventSecond
		if e.Count == 0 {
			r.err = fmt.Errorf("count %d: zero count", i)
			break
		}
		if k := len(c.Counts); k > 0 {
			prev := c.Counts[k-1]
			if prev.Key > e.Key || prev.Key == e.Key && prev.Second >= e.Second {
				r.err = fmt.Errorf("count %d: (%q, %d) is not after (%q, %d)", i, e.Key, e.Second, prev.Key, prev.Second)
				break
			}
		}
		c.Counts = append(c.Counts, e)
	}
	if err := r.done(); err != nil {
		return Counted{}, err
	}
	return c, nil
}

var errVarint = errors.New("malformed varint")

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := uvarint(r.s)
	if k == 0 {
		r.fail()
		return 0
	}
	if k < 0 {
		r.err = errVarint
		return 0
	}
	r.s = r.s[k:]
	return v
}
