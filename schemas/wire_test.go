package schemas

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWireRoundTrip(t *testing.T) {
	views := []View{{"i", "v", "", MinEventTS}, {"item-1", "viewer@x", "e:1", 1796039940000}, {"a", "b", "c", MaxEventTS - 1}}
	for _, v := range views {
		t.Run("view "+v.ItemID, func(t *testing.T) {
			got, err := DecodeView(AppendView(nil, v))
			if err != nil || got != v {
				t.Errorf("got %+v, %v; want %+v", got, err, v)
			}
		})
	}
	likes := []Like{{"i", "u", true, 5, "r1"}, {"i", "u", false, 6, ""}}
	for _, l := range likes {
		t.Run("like "+l.RequestID, func(t *testing.T) {
			got, err := DecodeLike(AppendLike(nil, l))
			if err != nil || got != l {
				t.Errorf("got %+v, %v; want %+v", got, err, l)
			}
		})
	}
}

func TestWireRejects(t *testing.T) {
	const ts = 1796039940000
	good := AppendView(nil, View{"i", "v", "e", ts})
	year2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	tests := []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"empty", nil, "truncated"},
		{"version", append([]byte{9}, good[1:]...), "wire version"},
		{"kind", AppendLike(nil, Like{ItemID: "i", UserID: "u"}), "is a like"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"trailing", append(append([]byte{}, good...), 0), "trailing"},
		// Records written straight to Kafka never met the collector's checks.
		{"year 2200", AppendView(nil, View{"i", "v", "e", year2200}), "ts: is"},
		{"negative time", AppendView(nil, View{"i", "v", "e", -1}), "ts: is"},
		{"before 2000", AppendView(nil, View{"i", "v", "e", MinEventTS - 1}), "ts: is"},
		{"at 2100", AppendView(nil, View{"i", "v", "e", MaxEventTS}), "ts: is"},
		{"empty item", AppendView(nil, View{"", "v", "e", ts}), "item_id: is required"},
		{"empty viewer", AppendView(nil, View{"i", "", "e", ts}), "viewer_id: is required"},
		{"long item", AppendView(nil, View{strings.Repeat("x", MaxIDLen+1), "v", "e", ts}), "item_id: is 129 bytes"},
		{"item with a NUL", AppendView(nil, View{"i\x00j", "v", "e", ts}), "item_id: has character"},
		{"event id with a space", AppendView(nil, View{"i", "v", "e 1", ts}), "event_id: has character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := DecodeView(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %+v, %v; want an error containing %q", v, err, tt.wantErr)
			}
		})
	}
}

func TestDecodeLikeRejectsBadIDs(t *testing.T) {
	tests := []struct {
		name    string
		like    Like
		wantErr string
	}{
		{"empty item", Like{UserID: "u", TS: 1}, "item_id: is required"},
		{"empty user", Like{ItemID: "i", TS: 1}, "user_id: is required"},
		{"user with a slash", Like{ItemID: "i", UserID: "a/b", TS: 1}, "user_id: has character"},
		{"long request id", Like{ItemID: "i", UserID: "u", RequestID: strings.Repeat("r", MaxIDLen+1)}, "request_id: is 129 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := DecodeLike(AppendLike(nil, tt.like))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %+v, %v; want an error containing %q", l, err, tt.wantErr)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendView(nil, View{"i", "v", "e", 1796039940000}))
	f.Add(AppendView(nil, View{"i", "v", "e", -1}))
	f.Add(AppendLike(nil, Like{"i", "u", true, 2, "r"}))
	f.Add([]byte{wireVersion, byte(KindView), 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeView(b)
		// On an error the fields are not part of the answer. A record that decodes must also be
		// one the collector would have accepted.
		want, wantErr := decodeViewRef(b)
		if wantErr == nil {
			if cerr := want.checkStored(); cerr != nil {
				want, wantErr = View{}, fmt.Errorf("decode view: %w", cerr)
			}
		}
		if errString(err) != errString(wantErr) || err == nil && v != want {
			t.Fatalf("DecodeView(%x): got %+v, %v; want %+v, %v", b, v, err, want, wantErr)
		}
		if err == nil {
			if back, err := DecodeView(AppendView(nil, v)); err != nil || back != v {
				t.Fatalf("view re-encode: got %+v, %v; want %+v", back, err, v)
			}
		}
		if l, err := DecodeLike(b); err == nil {
			if back, err := DecodeLike(AppendLike(nil, l)); err != nil || back != l {
				t.Fatalf("like re-encode: got %+v, %v; want %+v", back, err, l)
			}
		}
	})
}

// decodeViewRef is DecodeView written plainly on the bytes, the reference FuzzDecode compares
// the string-sharing reader against: same fields, same errors.
func decodeViewRef(b []byte) (View, error) {
	fail := func(err error) (View, error) { return View{}, fmt.Errorf("decode view: %w", err) }
	switch {
	case len(b) < 2:
		return fail(errShort)
	case b[0] != wireVersion:
		return View{}, fmt.Errorf("decode view: unknown wire version %d", b[0])
	case Kind(b[1]) != KindView:
		return View{}, fmt.Errorf("decode view: record is a %s", Kind(b[1]))
	}
	b = b[2:]
	if len(b) < 8 {
		return fail(errShort)
	}
	v := View{TS: int64(binary.BigEndian.Uint64(b))}
	b = b[8:]
	for _, dst := range []*string{&v.ItemID, &v.ViewerID, &v.EventID} {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > MaxIDLen*4 || uint64(len(b)-k) < n {
			return fail(errShort)
		}
		*dst = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	if len(b) != 0 {
		return fail(fmt.Errorf("%d trailing bytes", len(b)))
	}
	return v, nil
}
