package schemas

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format of a Kafka record value: a version byte, a kind byte, then the kind's fields.
// Strings are a uvarint length and the bytes; times are 8-byte big-endian Unix milliseconds.
// Binary keeps encode/decode cheap on the 100k events/s path; the version byte lets a later
// format coexist with records already in the log.
const wireVersion = 1

// AppendView appends v's wire encoding to dst.
func AppendView(dst []byte, v View) []byte {
	dst = append(dst, wireVersion, byte(KindView))
	dst = binary.BigEndian.AppendUint64(dst, uint64(v.TS))
	dst = appendString(dst, v.ItemID)
	dst = appendString(dst, v.ViewerID)
	return appendString(dst, v.EventID)
}

// AppendLike appends l's wire encoding to dst.
func AppendLike(dst []byte, l Like) []byte {
	dst = append(dst, wireVersion, byte(KindLike))
	dst = binary.BigEndian.AppendUint64(dst, uint64(l.TS))
	dst = appendString(dst, l.ItemID)
	dst = appendString(dst, l.UserID)
	liked := byte(0)
	if l.Liked {
		liked = 1
	}
	dst = append(dst, liked)
	return appendString(dst, l.RequestID)
}

var errShort = errors.New("truncated record")

// RecordKind is the kind a record value says it is, without decoding or checking it (0 for a
// value too short to say): readers of a topic that carries two kinds dispatch on it.
func RecordKind(b []byte) Kind {
	if len(b) < 2 {
		return 0
	}
	return Kind(b[1])
}

// AppendViewCount appends c's wire encoding to dst: second, count and seq as 8 bytes each,
// then the item and source ids.
func AppendViewCount(dst []byte, c ViewCount) []byte {
	dst = append(dst, wireVersion, byte(KindViewCount))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Second))
	dst = binary.BigEndian.AppendUint64(dst, c.Count)
	dst = binary.BigEndian.AppendUint64(dst, c.Seq)
	dst = appendString(dst, c.ItemID)
	return appendString(dst, c.SourceID)
}

// DecodeViewCount reads a view count from a record value and validates it as DecodeView does
// (ids, count range, the fixed time range).
func DecodeViewCount(b []byte) (ViewCount, error) {
	r, err := header(b, KindViewCount)
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

// DecodeView reads a view from a record value and validates it: the log can hold records that
// never passed the collector (written straight to Kafka, by an old or broken producer), and what
// is counted and stored must be what the collector would have accepted. Ids must pass CheckID
// and the time must lie in [MinEventTS, MaxEventTS). The returned strings do not alias b; they
// share one copy of the record's string bytes, so a decode costs one allocation, not one per
// field.
func DecodeView(b []byte) (View, error) {
	r, err := header(b, KindView)
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

// DecodeLike reads a like-state change from a record value.
func DecodeLike(b []byte) (Like, error) {
	r, err := header(b, KindLike)
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

// header checks the version and kind bytes and returns a reader over a copy of the rest.
func header(b []byte, want Kind) (reader, error) {
	if len(b) < 2 {
		return reader{}, fmt.Errorf("decode %s: %w", want, errShort)
	}
	if b[0] != wireVersion {
		return reader{}, fmt.Errorf("decode %s: unknown wire version %d", want, b[0])
	}
	if Kind(b[1]) != want {
		return reader{}, fmt.Errorf("decode %s: record is a %s", want, Kind(b[1]))
	}
	return reader{s: string(b[2:]), kind: want}, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
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

// AppendClick appends c's wire encoding to dst: the time, the six ids, then a presence byte and,
// when present, the fraud score's 8 IEEE 754 bytes.
func AppendClick(dst []byte, c Click) []byte {
	dst = append(dst, wireVersion, byte(KindClick))
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.TS))
	dst = appendString(dst, c.ClickID)
	dst = appendString(dst, c.AdID)
	dst = appendString(dst, c.CampaignID)
	dst = appendString(dst, c.UserHash)
	dst = appendString(dst, c.IPHash)
	dst = appendString(dst, c.Device)
	if !c.HasFraudScore {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return binary.BigEndian.AppendUint64(dst, scoreBits(c.FraudScore))
}

// DecodeClick reads a click from a record value and validates it as DecodeView does.
func DecodeClick(b []byte) (Click, error) {
	r, err := header(b, KindClick)
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
		c.FraudScore = scoreFromBits(uint64(r.int64()))
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

// AppendFraudVerdict appends v's wire encoding to dst.
func AppendFraudVerdict(dst []byte, v FraudVerdict) []byte {
	dst = append(dst, wireVersion, byte(KindFraudVerdict))
	dst = binary.BigEndian.AppendUint64(dst, uint64(v.DecidedAt))
	dst = appendString(dst, v.ClickID)
	dst = appendString(dst, v.AdID)
	dst = append(dst, byte(v.Verdict))
	return appendString(dst, v.Reason)
}

// DecodeFraudVerdict reads a fraud verdict from a record value and validates it.
func DecodeFraudVerdict(b []byte) (FraudVerdict, error) {
	r, err := header(b, KindFraudVerdict)
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
