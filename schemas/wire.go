package schemas

import (
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The wire format of a record value is Protobuf: one tally.v1.Record (proto/tally.proto), whose
// oneof field number is the record's Kind, so any consumer with the schema reads the log. The
// codec is written on protowire rather than on the generated code (tallypb), so that a decode
// goes straight into the event type with one allocation for all its strings, as the binary
// format before it did on the 100k events/s path. Decoders also accept two other framings of
// the same data: the Confluent framing that schema-registry writers put in front of a message,
// and version 1, tally's own binary format before Protobuf (wire_v1.go), so that an existing
// log is still read. Writers write plain Protobuf.
//
// Decoding is stricter than Protobuf's merge rules: a record holds exactly one message, and a
// known field must have its declared wire type. Unknown fields are skipped, so records of a
// later schema with added fields still decode.

var errShort = errors.New("truncated record")

// maxKind is the highest Kind a Record's oneof carries.
const maxKind = KindViewCount

// RecordKind is the kind a record value says it is, without decoding or checking it (0 for a
// value that does not say): readers of a topic that carries two kinds dispatch on it.
func RecordKind(b []byte) Kind {
	if len(b) >= 2 && b[0] == wireV1 {
		return Kind(b[1])
	}
	b, err := unframe(b)
	if err != nil {
		return 0
	}
	k, _ := recordTag(b)
	return k
}

// recordTag reads the tag of a Record's message field: its kind and length, or 0 and a
// negative length when b does not start with one.
func recordTag(b []byte) (Kind, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || typ != protowire.BytesType || num < 1 || num > protowire.Number(maxKind) {
		return 0, -1
	}
	return Kind(num), n
}

// unframe strips the Confluent framing when b carries it: a zero byte (never the first byte
// of a Protobuf message, since field 0 does not exist), the 4-byte schema id, and the message
// indexes, which must name the file's first message, Record.
func unframe(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != 0 {
		return b, nil
	}
	if len(b) < 6 {
		return nil, errShort
	}
	rest := b[5:]
	count, n := protowire.ConsumeVarint(rest)
	if n < 0 {
		return nil, protowire.ParseError(n)
	}
	rest = rest[n:]
	switch protowire.DecodeZigZag(count) {
	case 0: // the short form of [0]
		return rest, nil
	case 1:
		idx, n := protowire.ConsumeVarint(rest)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		if protowire.DecodeZigZag(idx) == 0 {
			return rest[n:], nil
		}
	}
	return nil, errors.New("registry framing names a message other than tally.v1.Record")
}

// openRecord checks that b is a Record holding a message of kind want and returns a reader over
// a copy of that message.
func openRecord(b []byte, want Kind) (pbReader, error) {
	fail := func(err error) (pbReader, error) { return pbReader{}, fmt.Errorf("decode %s: %w", want, err) }
	b, err := unframe(b)
	if err != nil {
		return fail(err)
	}
	if len(b) == 0 {
		return fail(errShort)
	}
	k, n := recordTag(b)
	switch {
	case k == 0:
		return fail(errors.New("not a tally record"))
	case k != want:
		return fail(fmt.Errorf("record is a %s", k))
	}
	msg, m := protowire.ConsumeBytes(b[n:])
	if m < 0 {
		return fail(errShort)
	}
	if rest := len(b) - n - m; rest != 0 {
		return fail(fmt.Errorf("%d bytes after the message", rest))
	}
	return pbReader{b: msg, s: string(msg), end: len(msg), kind: want}, nil
}

// pbReader reads the fields of one message in b[pos:end]. s is a copy of b: strings are its
// substrings, so they never alias the record and share one allocation. The first failure
// sticks in err; next then reports no more fields.
type pbReader struct {
	b        []byte
	s        string
	pos, end int
	num      protowire.Number
	typ      protowire.Type
	kind     Kind
	err      error
}

// next reads the next field's tag into num and typ. Tags of one byte (every field of tally's
// messages) take the short path.
func (r *pbReader) next() bool {
	if r.err != nil || r.pos >= r.end {
		return false
	}
	if c := r.b[r.pos]; c < 0x80 && c >= 1<<3 {
		r.num, r.typ = protowire.Number(c>>3), protowire.Type(c&7)
		r.pos++
		return true
	}
	num, typ, n := protowire.ConsumeTag(r.b[r.pos:r.end])
	if n < 0 {
		r.err = protowire.ParseError(n)
		return false
	}
	r.num, r.typ, r.pos = num, typ, r.pos+n
	return true
}

// want checks that the current field has wire type t.
func (r *pbReader) want(t protowire.Type) bool {
	if r.typ != t {
		r.err = fmt.Errorf("field %d has wire type %d; want %d", r.num, r.typ, t)
		return false
	}
	return true
}

// rawVarint reads a varint, one-byte ones on the short path.
func (r *pbReader) rawVarint() uint64 {
	if r.pos < r.end {
		if c := r.b[r.pos]; c < 0x80 {
			r.pos++
			return uint64(c)
		}
	}
	v, n := protowire.ConsumeVarint(r.b[r.pos:r.end])
	if n < 0 {
		r.err = protowire.ParseError(n)
		return 0
	}
	r.pos += n
	return v
}

func (r *pbReader) varint() uint64 {
	if !r.want(protowire.VarintType) {
		return 0
	}
	return r.rawVarint()
}

// small is a varint field that must fit in max (an enum or a 32-bit field).
func (r *pbReader) small(max uint64) uint64 {
	v := r.varint()
	if v > max && r.err == nil {
		r.err = fmt.Errorf("field %d is %d; at most %d", r.num, v, max)
	}
	return v
}

func (r *pbReader) fixed64() uint64 {
	if !r.want(protowire.Fixed64Type) {
		return 0
	}
	v, n := protowire.ConsumeFixed64(r.b[r.pos:r.end])
	if n < 0 {
		r.err = protowire.ParseError(n)
		return 0
	}
	r.pos += n
	return v
}

// bytes returns the bounds of the current length-delimited field and moves past it.
func (r *pbReader) bytes() (from, to int) {
	if !r.want(protowire.BytesType) {
		return 0, 0
	}
	n := r.rawVarint()
	if r.err == nil && n > uint64(r.end-r.pos) {
		r.err = io.ErrUnexpectedEOF
	}
	if r.err != nil {
		return 0, 0
	}
	from = r.pos
	r.pos += int(n)
	return from, r.pos
}

func (r *pbReader) string() string {
	from, to := r.bytes()
	return r.s[from:to]
}

// message returns a reader over the current field's message.
func (r *pbReader) message() pbReader {
	from, to := r.bytes()
	return pbReader{b: r.b, s: r.s, pos: from, end: to, kind: r.kind, err: r.err}
}

// skip moves past a field the reader does not know.
func (r *pbReader) skip() {
	n := protowire.ConsumeFieldValue(r.num, r.typ, r.b[r.pos:r.end])
	if n < 0 {
		r.err = protowire.ParseError(n)
		return
	}
	r.pos += n
}

func (r *pbReader) done() error {
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", r.kind, r.err)
	}
	return nil
}

// Encoding: fields in number order, zero values left out, as protoc's encoders write them.
// Every field number here is below 16, so every tag is one byte.

func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func appendString(dst []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return dst
	}
	dst = append(dst, byte(num)<<3|byte(protowire.BytesType))
	if len(s) < 0x80 {
		dst = append(dst, byte(len(s)))
	} else {
		dst = protowire.AppendVarint(dst, uint64(len(s)))
	}
	return append(dst, s...)
}

func appendVarint(dst []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return dst
	}
	dst = append(dst, byte(num)<<3|byte(protowire.VarintType))
	if v < 0x80 {
		return append(dst, byte(v))
	}
	return protowire.AppendVarint(dst, v)
}

// appendMessageHeader appends the tag and length of a message field of size bytes.
func appendMessageHeader(dst []byte, num protowire.Number, size int) []byte {
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendVarint(dst, uint64(size))
}

func boolVarint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// AppendView appends v's wire encoding to dst.
func AppendView(dst []byte, v View) []byte {
	size := sizeString(v.ItemID) + sizeString(v.ViewerID) + sizeString(v.EventID) + sizeVarint(uint64(v.TS))
	dst = appendMessageHeader(dst, protowire.Number(KindView), size)
	dst = appendString(dst, 1, v.ItemID)
	dst = appendString(dst, 2, v.ViewerID)
	dst = appendString(dst, 3, v.EventID)
	return appendVarint(dst, 4, uint64(v.TS))
}

// DecodeView reads a view from a record value and validates it: the log can hold records that
// never passed the collector (written straight to Kafka, by an old or broken producer), and what
// is counted and stored must be what the collector would have accepted. Ids must pass CheckID
// and the time must lie in [MinEventTS, MaxEventTS). The returned strings do not alias b; they
// share one copy of the record's bytes, so a decode costs one allocation, not one per field.
func DecodeView(b []byte) (View, error) {
	if isV1(b) {
		return decodeViewV1(b)
	}
	r, err := openRecord(b, KindView)
	if err != nil {
		return View{}, err
	}
	var v View
	for r.next() {
		switch r.num {
		case 1:
			v.ItemID = r.string()
		case 2:
			v.ViewerID = r.string()
		case 3:
			v.EventID = r.string()
		case 4:
			v.TS = int64(r.varint())
		default:
			r.skip()
		}
	}
	return v, finish(&r, v.checkStored)
}

// finish returns the reader's error or, when it read cleanly, the value's check.
func finish(r *pbReader, check func() error) error {
	if err := r.done(); err != nil {
		return err
	}
	if err := check(); err != nil {
		return fmt.Errorf("decode %s: %w", r.kind, err)
	}
	return nil
}

// AppendLike appends l's wire encoding to dst.
func AppendLike(dst []byte, l Like) []byte {
	size := sizeString(l.ItemID) + sizeString(l.UserID) + sizeVarint(boolVarint(l.Liked)) + sizeVarint(uint64(l.TS)) + sizeString(l.RequestID)
	dst = appendMessageHeader(dst, protowire.Number(KindLike), size)
	dst = appendString(dst, 1, l.ItemID)
	dst = appendString(dst, 2, l.UserID)
	dst = appendVarint(dst, 3, boolVarint(l.Liked))
	dst = appendVarint(dst, 4, uint64(l.TS))
	return appendString(dst, 5, l.RequestID)
}

// DecodeLike reads a like-state change from a record value.
func DecodeLike(b []byte) (Like, error) {
	if isV1(b) {
		return decodeLikeV1(b)
	}
	r, err := openRecord(b, KindLike)
	if err != nil {
		return Like{}, err
	}
	var l Like
	for r.next() {
		switch r.num {
		case 1:
			l.ItemID = r.string()
		case 2:
			l.UserID = r.string()
		case 3:
			l.Liked = r.varint() != 0
		case 4:
			l.TS = int64(r.varint())
		case 5:
			l.RequestID = r.string()
		default:
			r.skip()
		}
	}
	return l, finish(&r, l.checkStored)
}

// AppendViewCount appends c's wire encoding to dst.
func AppendViewCount(dst []byte, c ViewCount) []byte {
	size := sizeString(c.ItemID) + sizeVarint(uint64(c.Second)) + sizeVarint(c.Count) + sizeString(c.SourceID) + sizeVarint(c.Seq)
	dst = appendMessageHeader(dst, protowire.Number(KindViewCount), size)
	dst = appendString(dst, 1, c.ItemID)
	dst = appendVarint(dst, 2, uint64(c.Second))
	dst = appendVarint(dst, 3, c.Count)
	dst = appendString(dst, 4, c.SourceID)
	return appendVarint(dst, 5, c.Seq)
}

// DecodeViewCount reads a view count from a record value and validates it as DecodeView does
// (ids, count range, the fixed time range).
func DecodeViewCount(b []byte) (ViewCount, error) {
	if isV1(b) {
		return decodeViewCountV1(b)
	}
	r, err := openRecord(b, KindViewCount)
	if err != nil {
		return ViewCount{}, err
	}
	var c ViewCount
	for r.next() {
		switch r.num {
		case 1:
			c.ItemID = r.string()
		case 2:
			c.Second = int64(r.varint())
		case 3:
			c.Count = r.varint()
		case 4:
			c.SourceID = r.string()
		case 5:
			c.Seq = r.varint()
		default:
			r.skip()
		}
	}
	return c, finish(&r, c.checkStored)
}

// AppendClick appends c's wire encoding to dst.
func AppendClick(dst []byte, c Click) []byte {
	size := sizeString(c.ClickID) + sizeString(c.AdID) + sizeString(c.CampaignID) + sizeString(c.UserHash) +
		sizeString(c.IPHash) + sizeString(c.Device) + sizeVarint(uint64(c.TS))
	if c.HasFraudScore {
		size += 1 + 8
	}
	dst = appendMessageHeader(dst, protowire.Number(KindClick), size)
	dst = appendString(dst, 1, c.ClickID)
	dst = appendString(dst, 2, c.AdID)
	dst = appendString(dst, 3, c.CampaignID)
	dst = appendString(dst, 4, c.UserHash)
	dst = appendString(dst, 5, c.IPHash)
	dst = appendString(dst, 6, c.Device)
	dst = appendVarint(dst, 7, uint64(c.TS))
	if !c.HasFraudScore {
		return dst
	}
	dst = protowire.AppendTag(dst, 8, protowire.Fixed64Type)
	return protowire.AppendFixed64(dst, math.Float64bits(c.FraudScore))
}

// DecodeClick reads a click from a record value and validates it as DecodeView does.
func DecodeClick(b []byte) (Click, error) {
	if isV1(b) {
		return decodeClickV1(b)
	}
	r, err := openRecord(b, KindClick)
	if err != nil {
		return Click{}, err
	}
	var c Click
	for r.next() {
		switch r.num {
		case 1:
			c.ClickID = r.string()
		case 2:
			c.AdID = r.string()
		case 3:
			c.CampaignID = r.string()
		case 4:
			c.UserHash = r.string()
		case 5:
			c.IPHash = r.string()
		case 6:
			c.Device = r.string()
		case 7:
			c.TS = int64(r.varint())
		case 8:
			c.FraudScore, c.HasFraudScore = math.Float64frombits(r.fixed64()), true
		default:
			r.skip()
		}
	}
	return c, finish(&r, c.checkStored)
}

// AppendFraudVerdict appends v's wire encoding to dst.
func AppendFraudVerdict(dst []byte, v FraudVerdict) []byte {
	size := sizeString(v.ClickID) + sizeString(v.AdID) + sizeVarint(uint64(v.Verdict)) + sizeString(v.Reason) + sizeVarint(uint64(v.DecidedAt))
	dst = appendMessageHeader(dst, protowire.Number(KindFraudVerdict), size)
	dst = appendString(dst, 1, v.ClickID)
	dst = appendString(dst, 2, v.AdID)
	dst = appendVarint(dst, 3, uint64(v.Verdict))
	dst = appendString(dst, 4, v.Reason)
	return appendVarint(dst, 5, uint64(v.DecidedAt))
}

// DecodeFraudVerdict reads a fraud verdict from a record value and validates it.
func DecodeFraudVerdict(b []byte) (FraudVerdict, error) {
	if isV1(b) {
		return decodeFraudVerdictV1(b)
	}
	r, err := openRecord(b, KindFraudVerdict)
	if err != nil {
		return FraudVerdict{}, err
	}
	var v FraudVerdict
	for r.next() {
		switch r.num {
		case 1:
			v.ClickID = r.string()
		case 2:
			v.AdID = r.string()
		case 3:
			v.Verdict = Verdict(r.small(math.MaxUint8))
		case 4:
			v.Reason = r.string()
		case 5:
			v.DecidedAt = int64(r.varint())
		default:
			r.skip()
		}
	}
	return v, finish(&r, v.checkStored)
}

// recordAdID reads the ad id (field 2 of both a click and a fraud verdict) of a record of
// kind k, without checking the other fields.
func recordAdID(b []byte, k Kind) (string, bool) {
	if isV1(b) {
		return recordAdIDV1(b, k)
	}
	r, err := openRecord(b, k)
	if err != nil {
		return "", false
	}
	ad := ""
	for r.next() {
		if r.num == 2 {
			ad = r.string()
		} else {
			r.skip()
		}
	}
	return ad, r.err == nil
}
