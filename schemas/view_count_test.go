package schemas

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseViewCountJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	sec := now.Add(-time.Minute).Unix()
	s := itoa(sec)
	want := ViewCount{ItemID: "i1", Second: sec, Count: 500, SourceID: "edge-7", Seq: 42}
	tests := []struct {
		name      string
		in        string
		typed     bool
		want      ViewCount
		wantField string
	}{
		{"plain", `{"item_id":"i1","second":` + s + `,"count":500,"source_id":"edge-7","seq":42}`, false, want, ""},
		{"typed", `{"type":"view_count","item_id":"i1","second":` + s + `,"count":500,"source_id":"edge-7","seq":42}`, true, want, ""},
		{"rfc3339 second", `{"item_id":"i1","second":"` + now.Add(-time.Minute).Format(time.RFC3339) + `","count":500,"source_id":"edge-7","seq":42}`, false, want, ""},
		{"seq zero", `{"item_id":"i1","second":` + s + `,"count":1,"source_id":"e","seq":0}`, false, ViewCount{ItemID: "i1", Second: sec, Count: 1, SourceID: "e"}, ""},
		{"seq max", `{"item_id":"i1","second":` + s + `,"count":1,"source_id":"e","seq":18446744073709551615}`, false, ViewCount{ItemID: "i1", Second: sec, Count: 1, SourceID: "e", Seq: 1<<64 - 1}, ""},
		{"count max", `{"item_id":"i1","second":` + s + `,"count":1000000000,"source_id":"e","seq":1}`, false, ViewCount{ItemID: "i1", Second: sec, Count: MaxViewCount, SourceID: "e", Seq: 1}, ""},
		{"type missing", `{"item_id":"i1","second":` + s + `,"count":5,"source_id":"e","seq":1}`, true, ViewCount{}, "type"},
		{"type view", `{"type":"view","item_id":"i1","second":` + s + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "type"},
		{"item missing", `{"second":` + s + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "item_id"},
		{"item bad", `{"item_id":"i 1","second":` + s + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "item_id"},
		{"second missing", `{"item_id":"i1","count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"second fraction", `{"item_id":"i1","second":1.5,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"second in ms", `{"item_id":"i1","second":` + itoa(sec*1000) + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"second too old", `{"item_id":"i1","second":` + itoa(sec-2*86400) + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"second future", `{"item_id":"i1","second":` + itoa(sec+3600) + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"second text fraction", `{"item_id":"i1","second":"2026-11-30T11:59:00.5Z","count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"second huge", `{"item_id":"i1","second":9223372036854775807,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, "second"},
		{"count missing", `{"item_id":"i1","second":` + s + `,"source_id":"e","seq":1}`, false, ViewCount{}, "count"},
		{"count zero", `{"item_id":"i1","second":` + s + `,"count":0,"source_id":"e","seq":1}`, false, ViewCount{}, "count"},
		{"count negative", `{"item_id":"i1","second":` + s + `,"count":-3,"source_id":"e","seq":1}`, false, ViewCount{}, "count"},
		{"count too big", `{"item_id":"i1","second":` + s + `,"count":1000000001,"source_id":"e","seq":1}`, false, ViewCount{}, "count"},
		{"count string", `{"item_id":"i1","second":` + s + `,"count":"5","source_id":"e","seq":1}`, false, ViewCount{}, "count"},
		{"source missing", `{"item_id":"i1","second":` + s + `,"count":5,"seq":1}`, false, ViewCount{}, "source_id"},
		{"seq missing", `{"item_id":"i1","second":` + s + `,"count":5,"source_id":"e"}`, false, ViewCount{}, "seq"},
		{"seq negative", `{"item_id":"i1","second":` + s + `,"count":5,"source_id":"e","seq":-1}`, false, ViewCount{}, "seq"},
		{"seq overflow", `{"item_id":"i1","second":` + s + `,"count":5,"source_id":"e","seq":18446744073709551616}`, false, ViewCount{}, "seq"},
		{"viewer given", `{"item_id":"i1","viewer_id":"u","second":` + s + `,"count":5,"source_id":"e","seq":1}`, false, ViewCount{}, `"viewer_id"`},
		{"broken", `{"item_id":`, false, ViewCount{}, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseViewCountJSON([]byte(tt.in), tt.typed, now, testBounds)
			checkParse(t, got, tt.want, err, tt.wantField)
		})
	}
}

func TestParseEventJSONViewCount(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := itoa(now.Unix())
	tests := []struct {
		name      string
		in        string
		wantField string
	}{
		{"view count", `{"type":"view_count","item_id":"i1","second":` + s + `,"count":5,"source_id":"e","seq":1}`, ""},
		{"only known view keys", `{"type":"view_count","item_id":"i1"}`, "second"},
		{"bad count", `{"type":"view_count","item_id":"i1","second":` + s + `,"count":0,"source_id":"e","seq":1}`, "count"},
		{"unknown type names all three", `{"type":"views","item_id":"i1","second":1}`, "type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := ParseEventJSON([]byte(tt.in), now, testBounds)
			if tt.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField {
					t.Fatalf("got %+v, %v; want a FieldError for %s", ev, err, tt.wantField)
				}
				if tt.wantField == "type" && !strings.Contains(fe.Reason, `"view_count"`) {
					t.Errorf("got reason %q; want it to name \"view_count\"", fe.Reason)
				}
				return
			}
			if err != nil || ev.Kind != KindViewCount || ev.ViewCount.Count != 5 {
				t.Errorf("got %+v, %v; want a view count of 5", ev, err)
			}
		})
	}
}

func TestViewCountWire(t *testing.T) {
	c := ViewCount{ItemID: "post-1", Second: MinEventTS / 1000, Count: MaxViewCount, SourceID: "edge-eu-1", Seq: 1<<64 - 1}
	b := AppendViewCount(nil, c)
	if k := RecordKind(b); k != KindViewCount {
		t.Errorf("RecordKind: got %s; want %s", k, KindViewCount)
	}
	if k := RecordKind(AppendView(nil, View{ItemID: "i", ViewerID: "v", TS: MinEventTS})); k != KindView {
		t.Errorf("RecordKind of a view: got %s; want %s", k, KindView)
	}
	if k := RecordKind([]byte{1}); k != 0 {
		t.Errorf("RecordKind of one byte: got %s; want 0", k)
	}
	if back, err := DecodeViewCount(b); err != nil || back != c {
		t.Fatalf("round trip: got %+v, %v; want %+v", back, err, c)
	}
	if _, err := DecodeView(b); err == nil || !strings.Contains(err.Error(), "record is a view count") {
		t.Errorf("DecodeView of a view count: got %v; want \"record is a view count\"", err)
	}
	rejects := []struct {
		name    string
		c       ViewCount
		wantErr string
	}{
		{"count zero", ViewCount{ItemID: "i", Second: MinEventTS / 1000, Count: 0, SourceID: "e"}, "count"},
		{"count too big", ViewCount{ItemID: "i", Second: MinEventTS / 1000, Count: MaxViewCount + 1, SourceID: "e"}, "count"},
		{"second too early", ViewCount{ItemID: "i", Second: MinEventTS/1000 - 1, Count: 1, SourceID: "e"}, "second"},
		{"second too late", ViewCount{ItemID: "i", Second: MaxEventTS / 1000, Count: 1, SourceID: "e"}, "second"},
		{"no source", ViewCount{ItemID: "i", Second: MinEventTS / 1000, Count: 1}, "source_id"},
		{"bad item", ViewCount{ItemID: "a/b", Second: MinEventTS / 1000, Count: 1, SourceID: "e"}, "item_id"},
	}
	for _, tt := range rejects {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeViewCount(AppendViewCount(nil, tt.c))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %+v, %v; want an error naming %s", got, err, tt.wantErr)
			}
		})
	}
	if _, err := DecodeViewCount(b[:len(b)-1]); err == nil {
		t.Error("truncated record decoded; want an error")
	}
	if _, err := DecodeViewCount(append(b, 0)); err == nil {
		t.Error("record with a trailing byte decoded; want an error")
	}
}

func FuzzDecodeViewCount(f *testing.F) {
	f.Add(AppendViewCount(nil, ViewCount{ItemID: "i", Second: 1796039940, Count: 7, SourceID: "e", Seq: 3}))
	f.Add(AppendView(nil, View{"i", "v", "e", 1796039940000}))
	f.Add([]byte{wireV1, byte(KindViewCount)})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeViewCount(b)
		if err != nil {
			return
		}
		if cerr := c.checkStored(); cerr != nil {
			t.Fatalf("decoded an invalid view count %+v: %v", c, cerr)
		}
		if RecordKind(b) != KindViewCount {
			t.Fatalf("decoded a view count from a record of kind %s", RecordKind(b))
		}
		if back, err := DecodeViewCount(AppendViewCount(nil, c)); err != nil || back != c {
			t.Fatalf("re-encode: got %+v, %v; want %+v", back, err, c)
		}
	})
}

func FuzzParseViewCountJSON(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`{"type":"view_count","item_id":"i1","second":1796039940,"count":5,"source_id":"e","seq":1}`,
		`{"item_id":"i1","second":"2026-11-30T11:59:00Z","count":5,"source_id":"e","seq":0}`,
		`{"count":-1}`, `{"seq":1e3}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseViewCountJSON(b, false, now, testBounds)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %T %v; want a *FieldError", err, err)
			}
			return
		}
		if err := c.Validate(now, testBounds); err != nil {
			t.Fatalf("accepted an invalid view count %+v: %v", c, err)
		}
		if back, err := DecodeViewCount(AppendViewCount(nil, c)); err != nil || back != c {
			t.Fatalf("wire round trip: got %+v, %v; want %+v", back, err, c)
		}
	})
}
