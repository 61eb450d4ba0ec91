package schemas

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeReadsVersion1(t *testing.T) {
	const ts = 1796039940000
	view := View{"item-1", "viewer@x", "e:1", ts}
	like := Like{"i", "u", true, 5, "r1"}
	count := ViewCount{ItemID: "post-1", Second: ts / 1000, Count: 7, SourceID: "edge-1", Seq: 9}
	click := Click{ClickID: "k", AdID: "ad-7", CampaignID: "c", UserHash: "u", IPHash: "h", Device: "ios", TS: ts, FraudScore: 0.25, HasFraudScore: true}
	verdict := FraudVerdict{ClickID: "k", AdID: "ad-7", Verdict: VerdictFraud, Reason: "bot", DecidedAt: ts}
	counted := Counted{Kind: CountAds, Batch: BatchID{3, 2, 10, 20}, Chunk: 1, Chunks: 2, Counts: []BucketCount{{"ad-1", ts / 1000, 4}, {"ad-2", ts / 1000, 1}}}
	tests := []struct {
		name   string
		b      []byte
		kind   Kind
		decode func([]byte) (any, error)
		want   any
	}{
		{"view", appendViewV1(nil, view), KindView, func(b []byte) (any, error) { return DecodeView(b) }, view},
		{"like", appendLikeV1(nil, like), KindLike, func(b []byte) (any, error) { return DecodeLike(b) }, like},
		{"view count", appendViewCountV1(nil, count), KindViewCount, func(b []byte) (any, error) { return DecodeViewCount(b) }, count},
		{"click", appendClickV1(nil, click), KindClick, func(b []byte) (any, error) { return DecodeClick(b) }, click},
		{"verdict", appendFraudVerdictV1(nil, verdict), KindFraudVerdict, func(b []byte) (any, error) { return DecodeFraudVerdict(b) }, verdict},
		{"counted", appendCountedV1(nil, counted), KindCounted, func(b []byte) (any, error) { return DecodeCounted(b) }, counted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if k := RecordKind(tt.b); k != tt.kind {
				t.Errorf("RecordKind: got %s; want %s", k, tt.kind)
			}
			got, err := tt.decode(tt.b)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
			if _, err := tt.decode(tt.b[:len(tt.b)-1]); err == nil {
				t.Error("a truncated version 1 record decoded; want an error")
			}
		})
	}
}

func TestEncodings(t *testing.T) {
	for _, s := range samples() {
		t.Run(reflect.TypeOf(s.x).Name(), func(t *testing.T) {
			for _, e := range []Encoding{{}, {V1: true}, {SchemaID: 42}} {
				b := encodeAny(e, s.x)
				wantFirst := b[0] // a Protobuf tag
				switch {
				case e.V1:
					wantFirst = wireV1
				case e.SchemaID != 0:
					wantFirst = 0
					if !bytes.Equal(b[:6], []byte{0, 0, 0, 0, 42, 0}) || !bytes.Equal(b[6:], s.enc) {
						t.Errorf("%+v wrote %x; want the framing of id 42, then %x", e, b, s.enc)
					}
				}
				if b[0] != wantFirst || e == (Encoding{}) && !bytes.Equal(b, s.enc) {
					t.Errorf("%+v wrote %x", e, b)
				}
				if got, err := decodeAny(s.x, b); err != nil || !reflect.DeepEqual(got, s.x) {
					t.Errorf("%+v: got %+v, %v; want %+v", e, got, err, s.x)
				}
			}
		})
	}
}

func TestParseEncoding(t *testing.T) {
	tests := []struct {
		format  string
		id      int64
		want    Encoding
		wantErr string
	}{
		{"", 0, Encoding{}, ""},
		{"protobuf", 0, Encoding{}, ""},
		{"protobuf", 7, Encoding{SchemaID: 7}, ""},
		{"v1", 0, Encoding{V1: true}, ""},
		{"v1", 7, Encoding{}, "no schema id"},
		{"json", 0, Encoding{}, `record format "json"`},
		{"protobuf", -1, Encoding{}, "schema id -1"},
		{"protobuf", 1 << 31, Encoding{}, "schema id 2147483648"},
	}
	for _, tt := range tests {
		got, err := ParseEncoding(tt.format, tt.id)
		if got != tt.want || (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseEncoding(%q, %d): got %+v, %v; want %+v, error %q", tt.format, tt.id, got, err, tt.want, tt.wantErr)
		}
	}
}

// encodeAny encodes x, one of the event types, with e.
func encodeAny(e Encoding, x any) []byte {
	switch x := x.(type) {
	case View:
		return e.AppendView(nil, x)
	case Like:
		return e.AppendLike(nil, x)
	case ViewCount:
		return e.AppendViewCount(nil, x)
	case Click:
		return e.AppendClick(nil, x)
	case FraudVerdict:
		return e.AppendFraudVerdict(nil, x)
	case Counted:
		return e.AppendCounted(nil, x)
	}
	panic("encodeAny: not an event type")
}
