package schemas

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tallypipeline/tally/schemas/tallypb"
)

// inner is the message inside a record value (the value without the Record's tag and length).
func inner(b []byte) []byte {
	_, _, n := protowire.ConsumeTag(b)
	msg, _ := protowire.ConsumeBytes(b[n:])
	return msg
}

// rawRecord is a record of kind k whose message is the concatenated fields.
func rawRecord(k Kind, fields ...[]byte) []byte {
	msg := bytes.Join(fields, nil)
	return protowire.AppendBytes(protowire.AppendTag(nil, protowire.Number(k), protowire.BytesType), msg)
}

// toPB is the generated code's message for one of the event types: the reference the codec is
// held to.
func toPB(x any) *tallypb.Record {
	switch x := x.(type) {
	case View:
		return &tallypb.Record{Kind: &tallypb.Record_View{View: &tallypb.View{ItemId: x.ItemID, ViewerId: x.ViewerID, EventId: x.EventID, TsMs: x.TS}}}
	case Like:
		return &tallypb.Record{Kind: &tallypb.Record_Like{Like: &tallypb.Like{ItemId: x.ItemID, UserId: x.UserID, Liked: x.Liked, TsMs: x.TS, RequestId: x.RequestID}}}
	case ViewCount:
		return &tallypb.Record{Kind: &tallypb.Record_ViewCount{ViewCount: &tallypb.ViewCount{ItemId: x.ItemID, Second: x.Second, Count: x.Count, SourceId: x.SourceID, Seq: x.Seq}}}
	case Click:
		c := &tallypb.Click{ClickId: x.ClickID, AdId: x.AdID, CampaignId: x.CampaignID, UserHash: x.UserHash, IpHash: x.IPHash, Device: x.Device, TsMs: x.TS}
		if x.HasFraudScore {
			c.FraudScore = proto.Float64(x.FraudScore)
		}
		return &tallypb.Record{Kind: &tallypb.Record_Click{Click: c}}
	case FraudVerdict:
		return &tallypb.Record{Kind: &tallypb.Record_FraudVerdict{FraudVerdict: &tallypb.FraudVerdict{ClickId: x.ClickID, AdId: x.AdID, Verdict: tallypb.Verdict(x.Verdict), Reason: x.Reason, DecidedAtMs: x.DecidedAt}}}
	case Counted:
		c := &tallypb.Counted{Kind: tallypb.CountKind(x.Kind), Partition: x.Batch.Partition, Epoch: x.Batch.Epoch, StartOffset: x.Batch.Start, EndOffset: x.Batch.End, Chunk: x.Chunk, Chunks: x.Chunks}
		for _, e := range x.Counts {
			c.Counts = append(c.Counts, &tallypb.BucketCount{Key: e.Key, Second: e.Second, Count: e.Count})
		}
		return &tallypb.Record{Kind: &tallypb.Record_Counted{Counted: c}}
	}
	panic("toPB: not an event type")
}

// samples are records of every kind, with every field set and with optional fields empty.
func samples() []struct {
	x   any
	enc []byte
} {
	const ts = 1796039940000
	xs := []any{
		View{"item-1", "viewer@x", "e:1", ts}, View{"i", "v", "", MinEventTS},
		Like{"i", "u", true, 5, "r1"}, Like{"i", "u", false, 6, ""},
		ViewCount{ItemID: "post-1", Second: ts / 1000, Count: MaxViewCount, SourceID: "edge-1", Seq: 1<<64 - 1},
		Click{ClickID: "k", AdID: "ad-7", CampaignID: "c", UserHash: "u", IPHash: "h", Device: "ios", TS: ts, FraudScore: 0, HasFraudScore: true},
		Click{ClickID: "k", AdID: "ad-7", CampaignID: "c", UserHash: "u", IPHash: "h", Device: "ios", TS: ts},
		FraudVerdict{ClickID: "k", AdID: "ad-7", Verdict: VerdictValid, Reason: "checked", DecidedAt: ts},
		Counted{Kind: CountAds, Batch: BatchID{3, 2, 10, 20}, Chunk: 1, Chunks: 2, Counts: []BucketCount{{"ad-1", ts / 1000, 4}, {"ad-2", ts / 1000, 1}}},
		Counted{Kind: CountItems, Batch: BatchID{0, 0, 0, 0}, Chunks: 1},
	}
	out := make([]struct {
		x   any
		enc []byte
	}, len(xs))
	for i, x := range xs {
		out[i].x, out[i].enc = x, encodeAny(Encoding{}, x)
	}
	return out
}

// decodeAny decodes b as the kind of x.
func decodeAny(x any, b []byte) (any, error) {
	switch x.(type) {
	case View:
		return DecodeView(b)
	case Like:
		return DecodeLike(b)
	case ViewCount:
		return DecodeViewCount(b)
	case Click:
		return DecodeClick(b)
	case FraudVerdict:
		return DecodeFraudVerdict(b)
	case Counted:
		return DecodeCounted(b)
	}
	panic("decodeAny: not an event type")
}

// TestWireMatchesGeneratedCode holds the codec to the schema: it writes the bytes protoc's
// generated code writes, and decodes what that code writes.
func TestWireMatchesGeneratedCode(t *testing.T) {
	for _, s := range samples() {
		t.Run(reflect.TypeOf(s.x).Name(), func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(toPB(s.x))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(s.enc, want) {
				t.Errorf("encoding: got %x; want %x (generated code)", s.enc, want)
			}
			got, err := decodeAny(s.x, want)
			if err != nil || !reflect.DeepEqual(got, s.x) {
				t.Errorf("decoding the generated code's bytes: got %+v, %v; want %+v", got, err, s.x)
			}
		})
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(reflect.TypeOf(s.x).Name(), func(t *testing.T) {
			got, err := decodeAny(s.x, s.enc)
			if err != nil || !reflect.DeepEqual(got, s.x) {
				t.Errorf("got %+v, %v; want %+v", got, err, s.x)
			}
		})
	}
}

// TestWireFramings checks what else a reader accepts besides plain Protobuf: the schema
// registry's framing, and fields a later schema adds.
func TestWireFramings(t *testing.T) {
	v := View{"i", "v", "e", 1796039940000}
	plain := AppendView(nil, v)
	id := []byte{0, 0, 0, 0, 42}
	tests := []struct {
		name    string
		b       []byte
		wantErr string // "" to decode as v
	}{
		{"registry, short index", append(append(id, 0), plain...), ""},
		{"registry, index [0]", append(append(id, 2, 0), plain...), ""},
		{"registry, index [1]", append(append(id, 2, 2), plain...), "other than tally.v1.Record"},
		{"registry, cut", id[:3], "truncated"},
		{"an added field", rawRecord(KindView, inner(plain), []byte{15<<3 | 2, 1, 'x'}), ""},
		{"an added record kind", rawRecord(9, inner(plain)), "not a tally record"},
		{"two messages", append(append([]byte{}, plain...), plain...), "bytes after the message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeView(tt.b)
			if tt.wantErr == "" && (err != nil || got != v) {
				t.Errorf("got %+v, %v; want %+v", got, err, v)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("got %+v, %v; want an error containing %q", got, err, tt.wantErr)
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
		{"not a record", append([]byte{9}, good[1:]...), "not a tally record"},
		{"kind", AppendLike(nil, Like{ItemID: "i", UserID: "u"}), "is a like"},
		{"truncated", good[:len(good)-1], "truncated"},
		{"trailing", append(append([]byte{}, good...), 0), "1 bytes after the message"},
		{"wire type", rawRecord(KindView, []byte{1<<3 | 0, 1}), "field 1 has wire type 0"},
		{"cut field", rawRecord(KindView, []byte{1<<3 | 2, 5, 'a'}), "unexpected EOF"},
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

// FuzzDecode checks the view and like decoders against the generated code: what they accept
// (Protobuf, not version 1) the generated code reads as the same event, and it encodes back to
// itself.
func FuzzDecode(f *testing.F) {
	f.Add(AppendView(nil, View{"i", "v", "e", 1796039940000}))
	f.Add(AppendView(nil, View{"i", "v", "e", -1}))
	f.Add(AppendLike(nil, Like{"i", "u", true, 2, "r"}))
	f.Add(appendViewV1(nil, View{"i", "v", "e", 1796039940000}))
	f.Add(append([]byte{0, 0, 0, 0, 1, 0}, AppendView(nil, View{"i", "v", "e", 1796039940000})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, x := range []any{View{}, Like{}} {
			got, err := decodeAny(x, b)
			if err != nil {
				continue
			}
			if !isV1(b) {
				plain, _ := unframe(b)
				var rec tallypb.Record
				if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(plain, &rec); err != nil || !proto.Equal(&rec, toPB(got)) {
					t.Fatalf("decoded %x as %+v; the generated code reads %v, %v", b, got, &rec, err)
				}
			}
			var enc []byte
			switch g := got.(type) {
			case View:
				enc = AppendView(nil, g)
			case Like:
				enc = AppendLike(nil, g)
			}
			if back, err := decodeAny(x, enc); err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("re-encode: got %+v, %v; want %+v", back, err, got)
			}
		}
	})
}
