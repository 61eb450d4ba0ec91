package schemas

import (
	"reflect"
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
			for _, e := range []Encoding{EncodingProtobuf, EncodingV1} {
				b := encodeAny(e, s.x)
				if isV1(b) != (e == EncodingV1) {
					t.Errorf("encoding %d wrote %x", e, b)
				}
				if got, err := decodeAny(s.x, b); err != nil || !reflect.DeepEqual(got, s.x) {
					t.Errorf("encoding %d: got %+v, %v; want %+v", e, got, err, s.x)
				}
			}
		})
	}
	for _, tt := range []struct {
		in   string
		want Encoding
		err  bool
	}{{"", EncodingProtobuf, false}, {"protobuf", EncodingProtobuf, false}, {"v1", EncodingV1, false}, {"json", 0, true}} {
		if got, err := ParseEncoding(tt.in); got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseEncoding(%q): got %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
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
