package schemas

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testBounds = TimeBounds{Future: 5 * time.Minute, Late: 24 * time.Hour}

func TestParseViewJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		in        string
		typed     bool
		want      View
		wantField string
	}{
		{"minimal", `{"item_id":"i1","viewer_id":"u1"}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"rfc3339", `{"item_id":"i1","viewer_id":"u1","ts":"2026-11-30T11:59:00Z","event_id":"e1"}`, false, View{"i1", "u1", "e1", now.Add(-time.Minute).UnixMilli()}, ""},
		{"unix ms", `{"item_id":"i1","viewer_id":"u1","ts":1796039940000}`, false, View{"i1", "u1", "", 1796039940000}, ""},
		{"typed", `{"type":"view","item_id":"i1","viewer_id":"u1"}`, true, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"type required", `{"item_id":"i1","viewer_id":"u1"}`, true, View{}, "type"},
		{"wrong type", `{"type":"click","item_id":"i1","viewer_id":"u1"}`, false, View{}, "type"},
		{"missing item", `{"viewer_id":"u1"}`, false, View{}, "item_id"},
		{"missing viewer", `{"item_id":"i1"}`, false, View{}, "viewer_id"},
		{"long item", `{"item_id":"` + strings.Repeat("a", 129) + `","viewer_id":"u1"}`, false, View{}, "item_id"},
		{"bad char", `{"item_id":"a b","viewer_id":"u1"}`, false, View{}, "item_id"},
		{"number id", `{"item_id":5,"viewer_id":"u1"}`, false, View{}, "item_id"},
		{"unknown field", `{"item_id":"i1","viewer_id":"u1","itemid":"x"}`, false, View{}, `"itemid"`},
		{"future", `{"item_id":"i1","viewer_id":"u1","ts":"2026-11-30T12:10:00Z"}`, false, View{}, "ts"},
		{"too old", `{"item_id":"i1","viewer_id":"u1","ts":"2026-11-28T12:00:00Z"}`, false, View{}, "ts"},
		{"bad ts", `{"item_id":"i1","viewer_id":"u1","ts":"yesterday"}`, false, View{}, "ts"},
		{"float ts", `{"item_id":"i1","viewer_id":"u1","ts":1.5}`, false, View{}, "ts"},
		{"not json", `{"item_id":`, false, View{}, "body"},
		{"empty", ``, false, View{}, "body"},
		{"trailing", `{"item_id":"i1","viewer_id":"u1"} {}`, false, View{}, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseViewJSON([]byte(tt.in), tt.typed, now, testBounds)
			if tt.wantField == "" {
				if err != nil || got != tt.want {
					t.Errorf("got %+v, %v; want %+v, nil", got, err, tt.want)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Errorf("got error %v; want a FieldError on %s", err, tt.wantField)
			}
		})
	}
}

func FuzzParseViewJSON(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{`{"item_id":"i1","viewer_id":"u1"}`, `{"type":"view","item_id":"a","viewer_id":"b","ts":"2026-11-30T11:59:00Z"}`, `{"ts":1}`, `[]`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseViewJSON(b, false, now, testBounds)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %T %v; want a *FieldError", err, err)
			}
			return
		}
		if err := v.Validate(now, testBounds); err != nil {
			t.Fatalf("accepted an invalid view %+v: %v", v, err)
		}
		back, err := DecodeView(AppendView(nil, v))
		if err != nil || back != v {
			t.Fatalf("wire round trip: got %+v, %v; want %+v", back, err, v)
		}
	})
}
