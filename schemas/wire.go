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

// DecodeView reads a view from a record value and validates it: the log can hold records that
// never passed the collector (written straight to Kafka, by an old or broken producer), and what
// is counted and stored must be what the collector would have accepted. Ids must pass CheckID
// and the time must lie in [MinEventTS, MaxEventTS). The returned strings do not alias b.
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

func header(b []byte, want Kind) (*reader, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("decode %s: %w", want, errShort)
	}
	if b[0] != wireVersion {
		return nil, fmt.Errorf("decode %s: unknown wire version %d", want, b[0])
	}
	if Kind(b[1]) != want {
		return nil, fmt.Errorf("decode %s: record is a %s", want, Kind(b[1]))
	}
	return &reader{b: b[2:], kind: want}, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

type reader struct {
	b    []byte
	kind Kind
	err  error
}

func (r *reader) int64() int64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := int64(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) string() string {
	if r.err != nil {
		return ""
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > MaxIDLen*4 || uint64(len(r.b)-k) < n {
		r.fail()
		return ""
	}
	s := string(r.b[k : k+int(n)])
	r.b = r.b[k+int(n):]
	return s
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
}

func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", r.kind, r.err)
	}
	return nil
}
