package schemas

import (
	"encoding/json"
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

		// The fast path's shapes and the boundaries where it hands over to encoding/json.
		{"whitespace", " \t\r\n{ \"item_id\" :\t\"i1\" ,\n\"viewer_id\":\"u1\" }\r\n", false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"empty object", `{ }`, false, View{}, "item_id"},
		{"key order", `{"ts":1796039940000,"event_id":"e1","viewer_id":"u1","item_id":"i1","type":"view"}`, true, View{"i1", "u1", "e1", 1796039940000}, ""},
		{"nulls", `{"type":null,"item_id":"i1","viewer_id":"u1","event_id":null,"ts":null}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"null type typed", `{"type":null,"item_id":"i1","viewer_id":"u1"}`, true, View{}, "type"},
		{"null item", `{"item_id":null,"viewer_id":"u1"}`, false, View{}, "item_id"},
		{"null ts spaced", `{"item_id":"i1","viewer_id":"u1","ts" : null }`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"nullx ts", `{"item_id":"i1","viewer_id":"u1","ts":nullx}`, false, View{}, "body"},
		{"escaped value", `{"item_id":"i\u0031","viewer_id":"u\/1"}`, false, View{}, "viewer_id"},
		{"escaped value ok", `{"item_id":"i\u0031","viewer_id":"u1"}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"escaped key", `{"item\u005fid":"i1","viewer_id":"u1"}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"escaped newline", `{"item_id":"a\nb","viewer_id":"u1"}`, false, View{}, "item_id"},
		{"raw tab", "{\"item_id\":\"a\tb\",\"viewer_id\":\"u1\"}", false, View{}, "body"},
		{"duplicate key", `{"item_id":"i0","viewer_id":"u1","item_id":"i1"}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"duplicate null keeps", `{"item_id":"i1","item_id":null,"viewer_id":"u1"}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"duplicate ts", `{"item_id":"i1","viewer_id":"u1","ts":1,"ts":1796039940000}`, false, View{"i1", "u1", "", 1796039940000}, ""},
		{"upper-case key", `{"ITEM_ID":"i1","Viewer_Id":"u1"}`, false, View{ItemID: "i1", ViewerID: "u1", TS: now.UnixMilli()}, ""},
		{"unicode", `{"item_id":"é","viewer_id":"u1"}`, false, View{}, "item_id"},
		{"invalid utf-8", "{\"item_id\":\"\xff\",\"viewer_id\":\"u1\"}", false, View{}, "item_id"},
		{"del byte", "{\"item_id\":\"i\x7f\",\"viewer_id\":\"u1\"}", false, View{}, "item_id"},
		{"ts string ms", `{"item_id":"i1","viewer_id":"u1","ts":"1796039940000"}`, false, View{"i1", "u1", "", 1796039940000}, ""},
		{"ts string escaped", `{"item_id":"i1","viewer_id":"u1","ts":"2026-11-30T11:59:00\u005a"}`, false, View{"i1", "u1", "", 1796039940000}, ""},
		{"ts zero", `{"item_id":"i1","viewer_id":"u1","ts":0}`, false, View{}, "ts"},
		{"ts negative", `{"item_id":"i1","viewer_id":"u1","ts":-1796039940000}`, false, View{}, "ts"},
		{"ts max int64", `{"item_id":"i1","viewer_id":"u1","ts":9223372036854775807}`, false, View{}, "ts"},
		{"ts over int64", `{"item_id":"i1","viewer_id":"u1","ts":9223372036854775808}`, false, View{}, "ts"},
		{"ts under int64", `{"item_id":"i1","viewer_id":"u1","ts":-9223372036854775809}`, false, View{}, "ts"},
		{"ts leading zero", `{"item_id":"i1","viewer_id":"u1","ts":01796039940000}`, false, View{}, "body"},
		{"ts lone minus", `{"item_id":"i1","viewer_id":"u1","ts":-}`, false, View{}, "body"},
		{"ts exponent", `{"item_id":"i1","viewer_id":"u1","ts":1.79603994e12}`, false, View{}, "ts"},
		{"ts bool", `{"item_id":"i1","viewer_id":"u1","ts":true}`, false, View{}, "ts"},
		{"nested", `{"item_id":{"a":"i1"},"viewer_id":"u1"}`, false, View{}, "item_id"},
		{"array", `[{"item_id":"i1","viewer_id":"u1"}]`, false, View{}, "body"},
		{"whitespace only", " \n", false, View{}, "body"},
		{"trailing garbage", `{"item_id":"i1","viewer_id":"u1"}x`, false, View{}, "body"},
		{"trailing comma", `{"item_id":"i1","viewer_id":"u1",}`, false, View{}, "body"},
		{"missing colon", `{"item_id" "i1","viewer_id":"u1"}`, false, View{}, "body"},
		{"unterminated", `{"item_id":"i1","viewer_id":"u1`, false, View{}, "body"},
		{"trailing brace", `{"item_id":"i1","viewer_id":"u1"}}`, false, View{}, "body"},
		{"trailing bracket", `{"item_id":"i1","viewer_id":"u1"} ]`, false, View{}, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseViewJSON([]byte(tt.in), tt.typed, now, testBounds)
			std, stdErr := parseViewJSONStd([]byte(tt.in), tt.typed, now, testBounds)
			if got != std || errString(err) != errString(stdErr) {
				t.Errorf("got %+v, %q; want %+v, %q as from parseViewJSONStd", got, errString(err), std, errString(stdErr))
			}
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

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestDecodeInputFast pins which shapes take the fast path, so a change that quietly sends the
// common ones to encoding/json (still correct, just slow) shows up.
func TestDecodeInputFast(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{"type":"view","item_id":"item-123","viewer_id":"viewer-4567890","event_id":"e-1234567890","ts":1764460800000}`, true},
		{` { "item_id" : "i1" , "viewer_id":"u1", "ts" : "2026-11-30T11:59:00Z" } ` + "\n", true},
		{`{"type":null,"item_id":null,"viewer_id":"","event_id":null,"ts":null}`, true},
		{`{"ts":-5}`, true},
		{`{"ts":0}`, true},
		{`{}`, true},
		{`{"item_id":"i1","item_id":"i2"}`, false},
		{`{"Item_id":"i1"}`, false},
		{`{"item_id":"i\u0031"}`, false},
		{`{"item_id":"é"}`, false},
		{`{"item_id":5}`, false},
		{`{"ts":1.5}`, false},
		{`{"ts":1e3}`, false},
		{`{"ts":00}`, false},
		{`{"ts":-}`, false},
		{`{"ts":true}`, false},
		{`{"other":"x"}`, false},
		{`{"item_id":"i1"} x`, false},
		{`{"item_id":"i1"}}`, false},
		{`{"item_id":"i1",}`, false},
		{`{"item_id":"i1"`, false},
		{``, false},
		{`[]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if _, got := decodeInputFast([]byte(tt.in)); got != tt.want {
				t.Errorf("got ok %v; want %v", got, tt.want)
			}
		})
	}
}

// FuzzParseViewJSONFastPath checks that ParseViewJSON, fast path included, answers every input
// exactly as encoding/json alone (parseViewJSONStd) does: the same View and the same error text.
func FuzzParseViewJSONFastPath(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`{"type":"view","item_id":"item-123","viewer_id":"viewer-4567890","event_id":"e-1234567890","ts":1796039940000}`,
		`{"item_id":"i1","viewer_id":"u1","ts":"2026-11-30T11:59:00Z"}`,
		`{"item_id":"i1","viewer_id":"u1","ts":"2026-11-30T11:59:00.123+01:00"}`,
		`{"item_id":"i1","viewer_id":"u1","ts":"1796039940000"}`,
		" \t{ \"item_id\" : \"i1\" ,\n\"viewer_id\":\"u1\" }\r\n",
		`{"type":null,"item_id":"i1","viewer_id":"u1","event_id":null,"ts":null}`,
		`{}`,
		`{"item_id":"i\u0031","viewer_id":"u1"}`,
		`{"item\u005fid":"i1","viewer_id":"u1"}`,
		`{"item_id":"i0","item_id":"i1","viewer_id":"u1"}`,
		`{"item_id":"i1","item_id":null,"viewer_id":"u1"}`,
		`{"ts":1,"ts":null,"item_id":"i1","viewer_id":"u1"}`,
		`{"ITEM_ID":"i1","viewer_id":"u1"}`,
		`{"item_id":"é","viewer_id":"u1"}`,
		"{\"item_id\":\"\xff\",\"viewer_id\":\"u1\"}",
		"{\"item_id\":\"a\x01\",\"viewer_id\":\"u1\"}",
		`{"item_id":"i1","viewer_id":"u1","ts":9223372036854775808}`,
		`{"item_id":"i1","viewer_id":"u1","ts":-9223372036854775808}`,
		`{"item_id":"i1","viewer_id":"u1","ts":-0}`,
		`{"item_id":"i1","viewer_id":"u1","ts":01}`,
		`{"item_id":"i1","viewer_id":"u1","ts":1.5e3}`,
		`{"item_id":"i1","viewer_id":"u1","ts":nul}`,
		`{"item_id":"i1","viewer_id":"u1","ts":[1]}`,
		`{"item_id":5,"viewer_id":"u1"}`,
		`{"item_id":{"x":"y"},"viewer_id":"u1"}`,
		`{"item_id":"i1","viewer_id":"u1","x":1}`,
		`{"item_id":"i1","viewer_id":"u1"} {}`,
		`{"item_id":"i1","viewer_id":"u1"}]`,
		`{"item_id":"i1","viewer_id":"u1",}`,
		`{"item_id":"i1","viewer_id":"u1"`,
		`{"type":"click","item_id":"i1","viewer_id":"u1"}`,
		`[]`, `"x"`, `null`, ``, ` `,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, typed bool) {
		got, err := ParseViewJSON(b, typed, now, testBounds)
		want, wantErr := parseViewJSONStd(b, typed, now, testBounds)
		if got != want || errString(err) != errString(wantErr) {
			t.Fatalf("ParseViewJSON(%q, %v): got %+v, %q; want %+v, %q", b, typed, got, errString(err), want, errString(wantErr))
		}
		// parseTSJSON skips json.Unmarshal for plain strings, which both paths share; check that
		// shortcut against the decode it replaces, on what it is given: one JSON string, no spaces.
		if len(b) > 1 && b[0] == '"' && b[len(b)-1] == '"' && json.Valid(b) {
			var s string
			_ = json.Unmarshal(b, &s)
			wantTS, wantErr := ParseTS(s)
			if ts, err := parseTSJSON(b); ts != wantTS || errString(err) != errString(wantErr) {
				t.Fatalf("parseTSJSON(%q): got %d, %v; want %d, %v", b, ts, err, wantTS, wantErr)
			}
		}
	})
}
