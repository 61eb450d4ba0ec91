package schemas

import (
	"encoding/binary"
	"fmt"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	views := []View{{"i", "v", "", 0}, {"item-1", "viewer@x", "e:1", 1796039940000}, {"a", "b", "c", -1}}
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
	good := AppendView(nil, View{"i", "v", "e", 1})
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{9}, good[1:]...)},
		{"kind", AppendLike(nil, Like{ItemID: "i", UserID: "u"})},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if v, err := DecodeView(tt.b); err == nil {
				t.Errorf("got %+v, nil; want an error", v)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendView(nil, View{"i", "v", "e", 1}))
	f.Add(AppendLike(nil, Like{"i", "u", true, 2, "r"}))
	f.Add([]byte{wireVersion, byte(KindView), 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeView(b)
		// On an error the fields are not part of the answer.
		if want, wantErr := decodeViewRef(b); errString(err) != errString(wantErr) || err == nil && v != want {
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
