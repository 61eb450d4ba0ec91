package schemas

import (
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
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := DecodeView(b); err == nil {
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
