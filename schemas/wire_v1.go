package schemas

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Version 1 of the wire format, tally's own binary encoding before Protobuf: a version byte
// (1, never the first byte of a Protobuf message), a kind byte, then the kind's fields. Strings
// are a uvarint length and the bytes; times are 8-byte big-endian Unix milliseconds. It is
// decoded so that logs written before Protobuf are still read, and written only under
// Encoding.V1, while a rolling upgrade still runs readers that know nothing else.
const wireV1 = 1

// isV1 reports whether b is a version 1 record.
func isV1(b []byte) bool { return len(b) > 0 && b[0] == wireV1 }

// recordAdIDV1 reads a version 1 click's or verdict's ad id: both carry a time, the click id,
// then the ad id.
func recordAdIDV1(b []byte, k Kind) (string, bool) {
	r, err := headerV1(b, k)
	if err != nil {
		return "", false
	}
	r.int64()
	r.string()
	ad := r.string()
	return ad, r.err == nil
}

// decodeViewCountV1 is DecodeViewCount on a version 1 record.
func decodeViewCountV1(b []byte) (ViewCount, error) {
	r, err := headerV1(b, KindViewCount)
	if err != nil {
		return ViewCount{}, err
	}
	var c ViewCount
	c.Second = r.int64()
	c.Count = uint64(r.int64())
	c.Seq = uint64(r.int64())
	c.ItemID = r.string()
	c.SourceID = r.string()
	if err := r.done(); err != nil {
		return ViewCount{}, err
	}
	if err := c.checkStored(); err != nil {
		return ViewCount{}, fmt.Errorf("decode view count: %w", err)
	}
	return c, nil
}

// decodeViewV1 is DecodeView on a version 1 record.
func decodeViewV1(b []byte) (View, error) {
	r, err := headerV1(b, KindView)
	if err != nil {
		return View{}, err
	}
	var v View
	v.TS = r.int64()
	v.ItemID = r.string()
	v.ViewerID = r.string()
	v.EventID = r.string()
	if err := r.done(); err != nil {
		return View{}, err
	}
	if err := v.checkStored(); err != nil {
		return View{}, fmt.Errorf("decode view: %w", err)
	}
	return v, nil
}

// decodeLikeV1 is DecodeLike on a version 1 record.
func decodeLikeV1(b []byte) (Like, error) {
	r, err := headerV1(b, KindLike)
	if err != nil {
		return Like{}, err
	}
	var l Like
	l.TS = r.int64()
	l.ItemID = r.string()
	l.UserID = r.string()
	switch r.byte() {
	case 0:
	case 1:
		l.Liked = true
	default:
		r.err = errors.New("liked flag is neither 0 nor 1")
	}
	l.RequestID = r.string()
	if err := r.done(); err != nil {
		return Like{}, err
	}
	if err := l.checkStored(); err != nil {
		return Like{}, fmt.Errorf("decode like: %w", err)
	}
	return l, nil
}

// headerV1 checks the version and kind bytes and returns a reader over a copy of the rest.
func headerV1(b []byte, want Kind) (reader, error) {
	if len(b) < 2 {
		return reader{}, fmt.Errorf("decode %s: %w", want, errShort)
	}
	if b[0] != wireV1 {
		return reader{}, fmt.Errorf("decode %s: unknown wire version %d", want, b[0])
	}
	if Kind(b[1]) != want {
		return reader{}, fmt.Errorf("decode %s: record is a %s", want, Kind(b[1]))
	}
	return reader{s: string(b[2:]), kind: want}, nil
}

// reader reads fields from s, a copy of the record after its header: strings are substrings
// of it. The first failure sticks in err and makes every later read return a zero value.
type reader struct {
	s    string
	kind Kind
	err  error
}

func (r *reader) int64() int64 {
	if r.err != nil || len(r.s) < 8 {
		r.fail()
		return 0
	}
	var v uint64
	for i := range 8 {
		v = v<<8 | uint64(r.s[i])
	}
	r.s = r.s[8:]
	return int64(v)
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.s) < 1 {
		r.fail()
		return 0
	}
	c := r.s[0]
	r.s = r.s[1:]
	return c
}

func (r *reader) string() string {
	if r.err != nil {
		return ""
	}
	n, k := uvarint(r.s)
	if k <= 0 || n > MaxIDLen*4 || uint64(len(r.s)-k) < n {
		r.fail()
		return ""
	}
	s := r.s[k : k+int(n)]
	r.s = r.s[k+int(n):]
	return s
}

// uvarint is binary.Uvarint on a string: the value and the bytes read, 0 if s ends first,
// negative if the value overflows 64 bits.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s); i++ {
		if i == binary.MaxVarintLen64 {
			return 0, -(i + 1)
		}
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(i + 1)
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
}

func (r *reader) done() error {
	if r.err == nil && len(r.s) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.s))
	}
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", r.kind, r.err)
	}
	return nil
}

// decodeClickV1 is DecodeClick on a version 1 record.
func decodeClickV1(b []byte) (Click, error) {
	r, err := headerV1(b, KindClick)
	if err != nil {
		return Click{}, err
	}
	var c Click
	c.TS = r.int64()
	c.ClickID = r.string()
	c.AdID = r.string()
	c.CampaignID = r.string()
	c.UserHash = r.string()
	c.IPHash = r.string()
	c.Device = r.string()
	switch r.byte() {
	case 0:
	case 1:
		c.HasFraudScore = true
		c.FraudScore = math.Float64frombits(uint64(r.int64()))
	default:
		r.err = errors.New("fraud score flag is neither 0 nor 1")
	}
	if err := r.done(); err != nil {
		return Click{}, err
	}
	if err := c.checkStored(); err != nil {
		return Click{}, fmt.Errorf("decode click: %w", err)
	}
	return c, nil
}

// decodeFraudVerdictV1 is DecodeFraudVerdict on a version 1 record.
func decodeFraudVerdictV1(b []byte) (FraudVerdict, error) {
	r, err := headerV1(b, KindFraudVerdict)
	if err != nil {
		return FraudVerdict{}, err
	}
	var v FraudVerdict
	v.DecidedAt = r.int64()
	v.ClickID = r.string()
	v.AdID = r.string()
	v.Verdict = Verdict(r.byte())
	v.Reason = r.string()
	if err := r.done(); err != nil {
		return FraudVerdict{}, err
	}
	if err := v.checkStored(); err != nil {
		return FraudVerdict{}, fmt.Errorf("decode fraud verdict: %w", err)
	}
	return v, nil
}

// decodeCountedV1 is DecodeCounted on a version 1 record: the kind, the batch, the chunk, then
// the counts, each a key, its second as an offset from minEventSecond, and its count.
func decodeCountedV1(b []byte) (Counted, error) {
	r, err := headerV1(b, KindCounted)
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
	switch {
	case part > math.MaxInt32:
		r.err = fmt.Errorf("partition %d out of range", part)
	case chunk > math.MaxUint32 || chunks > math.MaxUint32:
		r.err = fmt.Errorf("chunk %d of %d", chunk, chunks)
	case n > MaxCountedChunk:
		r.err = fmt.Errorf("%d counts; want at most %d", n, MaxCountedChunk)
	}
	c.Batch.Partition, c.Chunk, c.Chunks = int32(part), uint32(chunk), uint32(chunks)
	for i := uint64(0); i < n && r.err == nil; i++ {
		e := BucketCount{Key: r.string()}
		sec := r.uvarint()
		e.Count = r.uvarint()
		if sec >= uint64(MaxEventTS/1000-minEventSecond) {
			r.err = fmt.Errorf("count %d: second out of range", i)
		}
		e.Second = int64(sec) + minEventSecond
		c.Counts = append(c.Counts, e)
	}
	if err := r.done(); err != nil {
		return Counted{}, err
	}
	if err := c.check(); err != nil {
		return Counted{}, fmt.Errorf("decode %s: %w", KindCounted, err)
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

func appendViewV1(dst []byte, v View) []byte {
	dst = append(dst, wireV1, byte(KindView))
	dst = binary.BigEndian.AppendUint64(dst, uint64(v.TS))
	dst = appendStringV1(dst, v.ItemID)
	dst = appendStringV1(dst, v.ViewerID)
	return appendStringV1(dst, v.EventID)
}

func appendLikeV1(dst []byte, l Like) []byte {
	dst = append(dst, wireV1, byte(KindLike))
	dst = binary.BigEndian.AppendUint64(dst, uint64(l.TS))
	dst = appendStringV1(dst, l.ItemID)
	dst = appendStringV1(dst, l.UserID)
	liked := byte(0)
	if l.Liked {
		liked = 1
	}
	dst = append(dst, liked)
	return appendStringV1(dst, l.RequestID)
}

func appendViewCountV1(dst []byte, c ViewCount) []byte {
	dst = append(dst, wireV1, byte(KindViewCount))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Second))
	dst = binary.BigEndian.AppendUint64(dst, c.Count)
	dst = binary.BigEndian.AppendUint64(dst, c.Seq)
	dst = appendStringV1(dst, c.ItemID)
	return appendStringV1(dst, c.SourceID)
}

func appendClickV1(dst []byte, c Click) []byte {
	dst = append(dst, wireV1, byte(KindClick))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.TS))
	dst = appendStringV1(dst, c.ClickID)
	dst = appendStringV1(dst, c.AdID)
	dst = appendStringV1(dst, c.CampaignID)
	dst = appendStringV1(dst, c.UserHash)
	dst = appendStringV1(dst, c.IPHash)
	dst = appendStringV1(dst, c.Device)
	if !c.HasFraudScore {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(c.FraudScore))
}

func appendFraudVerdictV1(dst []byte, v FraudVerdict) []byte {
	dst = append(dst, wireV1, byte(KindFraudVerdict))
	dst = binary.BigEndian.AppendUint64(dst, uint64(v.DecidedAt))
	dst = appendStringV1(dst, v.ClickID)
	dst = appendStringV1(dst, v.AdID)
	dst = append(dst, byte(v.Verdict))
	return appendStringV1(dst, v.Reason)
}

func appendCountedV1(dst []byte, c Counted) []byte {
	dst = append(dst, wireV1, byte(KindCounted), byte(c.Kind))
	dst = binary.AppendUvarint(dst, uint64(c.Batch.Partition))
	dst = binary.AppendUvarint(dst, c.Batch.Epoch)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Batch.Start))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Batch.End))
	dst = binary.AppendUvarint(dst, uint64(c.Chunk))
	dst = binary.AppendUvarint(dst, uint64(c.Chunks))
	dst = binary.AppendUvarint(dst, uint64(len(c.Counts)))
	for _, e := range c.Counts {
		dst = appendStringV1(dst, e.Key)
		dst = binary.AppendUvarint(dst, uint64(e.Second-minEventSecond))
		dst = binary.AppendUvarint(dst, e.Count)
	}
	return dst
}

func appendStringV1(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
