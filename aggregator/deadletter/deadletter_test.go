package deadletter

import (
	"bytes"
	"errors"
	"testing"
)

// The letter of a refused record names it, keeps its key and the reason, and holds a copy of at
// most MaxPayload bytes of it (Write, which the aggregators' tests run on the real engine,
// stores what it holds).
func TestOfRecord(t *testing.T) {
	big := bytes.Repeat([]byte{0xff}, MaxPayload+10)
	tests := []struct {
		name        string
		key, value  []byte
		wantRef     string
		wantPayload []byte
	}{
		{"small", []byte("ad-1"), []byte("junk"), "ad-1", []byte("junk")},
		{"no key, no value", nil, nil, "", nil},
		{"cut", []byte("ad-2"), big, "ad-2", big[:MaxPayload]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := OfRecord("clicks", 3, 42, tt.key, tt.value, errors.New("decode click: junk"))
			if l.Source != "clicks" || l.Partition != 3 || l.Offset != 42 || l.Ref != tt.wantRef || l.Reason != "decode click: junk" {
				t.Errorf("got %s %d/%d ref %q reason %q; want clicks 3/42 ref %q reason %q", l.Source, l.Partition, l.Offset, l.Ref, l.Reason, tt.wantRef, "decode click: junk")
			}
			if !bytes.Equal(l.Payload, tt.wantPayload) {
				t.Errorf("got a payload of %d bytes; want %d", len(l.Payload), len(tt.wantPayload))
			}
			if len(tt.value) > 0 {
				tt.value[0] ^= 1 // the fetch's buffer reused
				if l.Payload[0] == tt.value[0] {
					t.Errorf("the payload changed with the record's buffer; want a copy")
				}
				tt.value[0] ^= 1
			}
		})
	}
}
