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
			checkFastPath(t, viewShape, []byte(tt.in))
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

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestDecodeFast pins which shapes take the fast path, so a change that quietly sends the
// common ones to encoding/json (still correct, just slow) shows up.
func TestDecodeFast(t *testing.T) {
	const click = `"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"`
	tests := []struct {
		kind  string
		shape *inputShape
		in    string
		want  bool
	}{
		{"view", viewShape, `{"type":"view","item_id":"item-123","viewer_id":"viewer-4567890","event_id":"e-1234567890","ts":1764460800000}`, true},
		{"view", viewShape, ` { "item_id" : "i1" , "viewer_id":"u1", "ts" : "2026-11-30T11:59:00Z" } ` + "\n", true},
		{"view", viewShape, `{"type":null,"item_id":null,"viewer_id":"","event_id":null,"ts":null}`, true},
		{"view", viewShape, `{"ts":-5}`, true},
		{"view", viewShape, `{"ts":0}`, true},
		{"view", viewShape, `{}`, true},
		{"view", viewShape, `{"item_id":"i1","item_id":"i2"}`, false},
		{"view", viewShape, `{"Item_id":"i1"}`, false},
		{"view", viewShape, `{"item_id":"i\u0031"}`, false},
		{"view", viewShape, `{"item_id":"é"}`, false},
		{"view", viewShape, `{"item_id":5}`, false},
		{"view", viewShape, `{"ts":1.5}`, false},
		{"view", viewShape, `{"ts":1e3}`, false},
		{"view", viewShape, `{"ts":00}`, false},
		{"view", viewShape, `{"ts":-}`, false},
		{"view", viewShape, `{"ts":true}`, false},
		{"view", viewShape, `{"other":"x"}`, false},
		{"view", viewShape, `{"ad_id":"a1"}`, false},
		{"view", viewShape, `{"item_id":"i1"} x`, false},
		{"view", viewShape, `{"item_id":"i1"}}`, false},
		{"view", viewShape, `{"item_id":"i1",}`, false},
		{"view", viewShape, `{"item_id":"i1"`, false},
		{"view", viewShape, ``, false},
		{"view", viewShape, `[]`, false},
		{"click", clickShape, `{"type":"click",` + click + `,"ts":1764460800000,"fraud_score":0.25}`, true},
		{"click", clickShape, `{` + click + `,"ts":"2026-11-30T11:59:00Z","fraud_score":-1.5E+3}`, true},
		{"click", clickShape, `{` + click + `,"fraud_score":null}`, true},
		{"click", clickShape, `{` + click + `,"fraud_score":"0.5"}`, false},
		{"click", clickShape, `{` + click + `,"fraud_score":1.}`, false},
		{"click", clickShape, `{` + click + `,"fraud_score":1e}`, false},
		{"click", clickShape, `{` + click + `,"item_id":"i1"}`, false},
		{"verdict", verdictShape, `{"click_id":"k1","ad_id":"a1","verdict":"fraud","reason":"bot farm","decided_at":1764460800000}`, true},
		{"verdict", verdictShape, `{"type":"verdict","click_id":"k1"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.kind+" "+tt.in, func(t *testing.T) {
			var in inputValues
			if got := tt.shape.decodeFast([]byte(tt.in), &in); got != tt.want {
				t.Errorf("got ok %v; want %v", got, tt.want)
			}
			checkFastPath(t, tt.shape, []byte(tt.in))
		})
	}
}

// checkFastPath fails t unless sh's fast path, when it takes b, yields exactly what
// encoding/json does.
func checkFastPath(t *testing.T, sh *inputShape, b []byte) {
	t.Helper()
	var got, want inputValues
	if !sh.decodeFast(b, &got) {
		return
	}
	if err := sh.decodeStd(b, &want); err != nil || got != want {
		t.Fatalf("fast path of %q: got %q; want %q, %v as from encoding/json", b, got, want, err)
	}
}

// FuzzInputFastPath checks that the decoder's fast path answers every input it takes exactly as
// encoding/json does, for every kind of posted object, and the parseTSJSON shortcut both paths
// share against the decode it replaces.
func FuzzInputFastPath(f *testing.F) {
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
		`{"type":"click","click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios","ts":1796039940000,"fraud_score":0.25}`,
		`{"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios","fraud_score":1e-1}`,
		`{"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios","fraud_score":null,"ts":null}`,
		`{"click_id":"k1","click_id":"k2"}`, `{"fraud_score":-0}`, `{"fraud_score":01}`, `{"fraud_score":1.}`, `{"fraud_score":1e}`,
		`{"ts":"2026-11-30T11:59:00Z","CLICK_ID":"x"}`, ` { } `,
		`{"click_id":"k1","ad_id":"a1","verdict":"fraud","reason":"bot","decided_at":"2026-11-30T11:59:00Z"}`,
		`{"click_id":"k1","verdict":"valid","decided_at":1796039940000,"decided_at":null}`,
		`[]`, `"x"`, `null`, ``, ` `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, sh := range []*inputShape{viewShape, clickShape, verdictShape} {
			checkFastPath(t, sh, b)
		}
		// parseTSJSON skips json.Unmarshal for plain strings; check that shortcut against the
		// decode it replaces, on what it is given: one JSON string, no spaces.
		if len(b) > 1 && b[0] == '"' && b[len(b)-1] == '"' && json.Valid(b) {
			var s string
			_ = json.Unmarshal(b, &s)
			wantTS, wantErr := ParseTS(s)
			if ts, err := parseTSJSON(string(b)); ts != wantTS || errString(err) != errString(wantErr) {
				t.Fatalf("parseTSJSON(%q): got %d, %v; want %d, %v", b, ts, err, wantTS, wantErr)
			}
		}
	})
}
