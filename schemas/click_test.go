package schemas

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseClickJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const base = `"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"`
	full := Click{ClickID: "k1", AdID: "a1", CampaignID: "c1", UserHash: "u1", IPHash: "h1", Device: "ios", TS: now.UnixMilli()}
	scored := full
	scored.FraudScore, scored.HasFraudScore = 0.75, true
	earlier := full
	earlier.TS = now.Add(-time.Minute).UnixMilli()
	tests := []struct {
		name      string
		in        string
		typed     bool
		want      Click
		wantField string
	}{
		{"minimal", `{` + base + `}`, false, full, ""},
		{"typed", `{"type":"click",` + base + `}`, true, full, ""},
		{"type required", `{` + base + `}`, true, Click{}, "type"},
		{"wrong type", `{"type":"view",` + base + `}`, false, Click{}, "type"},
		{"score", `{` + base + `,"fraud_score":0.75}`, false, scored, ""},
		{"null score", `{` + base + `,"fraud_score":null}`, false, full, ""},
		{"score too high", `{` + base + `,"fraud_score":1.5}`, false, Click{}, "fraud_score"},
		{"score negative", `{` + base + `,"fraud_score":-0.1}`, false, Click{}, "fraud_score"},
		{"score string", `{` + base + `,"fraud_score":"0.5"}`, false, Click{}, "fraud_score"},
		{"score bool", `{` + base + `,"fraud_score":true}`, false, Click{}, "fraud_score"},
		{"ts", `{` + base + `,"ts":"2026-11-30T11:59:00Z"}`, false, earlier, ""},
		{"ts too old", `{` + base + `,"ts":"2026-11-20T11:59:00Z"}`, false, Click{}, "ts"},
		{"ts future", `{` + base + `,"ts":"2026-11-30T13:00:00Z"}`, false, Click{}, "ts"},
		{"missing click_id", `{"ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"}`, false, Click{}, "click_id"},
		{"missing ad_id", `{"click_id":"k1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"}`, false, Click{}, "ad_id"},
		{"missing campaign", `{"click_id":"k1","ad_id":"a1","user_hash":"u1","ip_hash":"h1","device":"ios"}`, false, Click{}, "campaign_id"},
		{"missing user", `{"click_id":"k1","ad_id":"a1","campaign_id":"c1","ip_hash":"h1","device":"ios"}`, false, Click{}, "user_hash"},
		{"missing ip", `{"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","device":"ios"}`, false, Click{}, "ip_hash"},
		{"missing device", `{"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1"}`, false, Click{}, "device"},
		{"bad ad", `{"click_id":"k1","ad_id":"a 1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"}`, false, Click{}, "ad_id"},
		{"unknown field", `{` + base + `,"item_id":"x"}`, false, Click{}, `"item_id"`},
		{"not json", `{"click_id":`, false, Click{}, "body"},
		{"trailing", `{` + base + `} x`, false, Click{}, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkFastPath(t, clickShape, []byte(tt.in))
			got, err := ParseClickJSON([]byte(tt.in), tt.typed, now, testBounds)
			checkParse(t, got, tt.want, err, tt.wantField)
		})
	}
}

func checkParse[T comparable](t *testing.T, got, want T, err error, wantField string) {
	t.Helper()
	if wantField == "" {
		if err != nil || got != want {
			t.Errorf("got %+v, %v; want %+v", got, err, want)
		}
		return
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != wantField {
		t.Errorf("got error %v; want a FieldError for %s", err, wantField)
	}
}

func TestParseFraudVerdictJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	keys := testKeys(t)
	signed, err := keys.Mint("ad-9", now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	decided := now.Add(-time.Minute).UnixMilli()
	tests := []struct {
		name      string
		in        string
		want      FraudVerdict
		wantField string
	}{
		{"unsigned with ad", `{"click_id":"k1","ad_id":"a1","verdict":"fraud","reason":"bot farm","decided_at":"2026-11-30T11:59:00Z"}`, FraudVerdict{"k1", "a1", VerdictFraud, "bot farm", decided}, ""},
		{"valid", `{"click_id":"k1","ad_id":"a1","verdict":"valid","decided_at":` + itoa(decided) + `}`, FraudVerdict{"k1", "a1", VerdictValid, "", decided}, ""},
		{"signed without ad", `{"click_id":"` + signed + `","verdict":"fraud","decided_at":` + itoa(decided) + `}`, FraudVerdict{signed, "ad-9", VerdictFraud, "", decided}, ""},
		{"signed same ad", `{"click_id":"` + signed + `","ad_id":"ad-9","verdict":"fraud","decided_at":` + itoa(decided) + `}`, FraudVerdict{signed, "ad-9", VerdictFraud, "", decided}, ""},
		{"signed other ad", `{"click_id":"` + signed + `","ad_id":"ad-8","verdict":"fraud","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "ad_id"},
		{"unsigned without ad", `{"click_id":"k1","verdict":"fraud","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "ad_id"},
		{"missing click", `{"ad_id":"a1","verdict":"fraud","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "click_id"},
		{"bad verdict", `{"click_id":"k1","ad_id":"a1","verdict":"maybe","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "verdict"},
		{"missing verdict", `{"click_id":"k1","ad_id":"a1","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "verdict"},
		{"missing decided_at", `{"click_id":"k1","ad_id":"a1","verdict":"fraud"}`, FraudVerdict{}, "decided_at"},
		{"decided in future", `{"click_id":"k1","ad_id":"a1","verdict":"fraud","decided_at":"2026-12-01T00:00:00Z"}`, FraudVerdict{}, "decided_at"},
		{"decided long ago", `{"click_id":"k1","ad_id":"a1","verdict":"fraud","decided_at":"2026-10-01T00:00:00Z"}`, FraudVerdict{"k1", "a1", VerdictFraud, "", time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).UnixMilli()}, ""},
		{"long reason", `{"click_id":"k1","ad_id":"a1","verdict":"fraud","reason":"` + strings.Repeat("r", MaxReasonLen+1) + `","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "reason"},
		{"control in reason", `{"click_id":"k1","ad_id":"a1","verdict":"fraud","reason":"a\nb","decided_at":` + itoa(decided) + `}`, FraudVerdict{}, "reason"},
		{"unknown field", `{"click_id":"k1","ad_id":"a1","verdict":"fraud","decided_at":` + itoa(decided) + `,"score":1}`, FraudVerdict{}, `"score"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFraudVerdictJSON([]byte(tt.in), now, testBounds)
			checkParse(t, got, tt.want, err, tt.wantField)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestParseEventJSON(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		in        string
		wantKind  Kind
		wantField string
	}{
		{"view fast", `{"type":"view","item_id":"i1","viewer_id":"u1"}`, KindView, ""},
		{"view slow", `{"type":"view","item_id":"i\u0031","viewer_id":"u1"}`, KindView, ""},
		{"click", `{"type":"click","click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"web"}`, KindClick, ""},
		{"click escaped type", `{"type":"cl\u0069ck","click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"web"}`, KindClick, ""},
		{"click bad field", `{"type":"click","click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1"}`, 0, "device"},
		{"click only type", `{"type":"click"}`, 0, "click_id"},
		{"view with click field", `{"type":"view","item_id":"i1","viewer_id":"u1","ad_id":"a"}`, 0, `"ad_id"`},
		{"no type", `{"item_id":"i1","viewer_id":"u1"}`, 0, "type"},
		{"other type", `{"type":"like","item_id":"i1","viewer_id":"u1"}`, 0, "type"},
		{"broken", `{"type":"click",`, 0, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := ParseEventJSON([]byte(tt.in), now, testBounds)
			if tt.wantField != "" {
				checkParse(t, ev, Event{}, err, tt.wantField)
				return
			}
			if err != nil || ev.Kind != tt.wantKind {
				t.Errorf("got %+v, %v; want kind %s", ev, err, tt.wantKind)
			}
		})
	}
}

func TestClickWire(t *testing.T) {
	clicks := []Click{
		{ClickID: "k", AdID: "a", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: MinEventTS},
		{ClickID: "k", AdID: "a", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: 1796039940000, FraudScore: 0.5, HasFraudScore: true},
		{ClickID: "k", AdID: "a", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: 1796039940000, FraudScore: 0, HasFraudScore: true},
	}
	for _, c := range clicks {
		got, err := DecodeClick(AppendClick(nil, c))
		if err != nil || got != c {
			t.Errorf("got %+v, %v; want %+v", got, err, c)
		}
	}
	verdicts := []FraudVerdict{{"k", "a", VerdictFraud, "bot", 1796039940000}, {"k", "a", VerdictValid, "", MinEventTS}}
	for _, v := range verdicts {
		got, err := DecodeFraudVerdict(AppendFraudVerdict(nil, v))
		if err != nil || got != v {
			t.Errorf("got %+v, %v; want %+v", got, err, v)
		}
	}
	good := clicks[1]
	bad := []struct {
		name    string
		b       []byte
		wantErr string
	}{
		{"view as click", AppendView(nil, View{"i", "v", "", MinEventTS}), "is a view"},
		{"truncated", AppendClick(nil, good)[:20], "truncated"},
		{"score out of range", AppendClick(nil, Click{ClickID: "k", AdID: "a", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: MinEventTS, FraudScore: 2, HasFraudScore: true}), "fraud_score"},
		{"empty ad", AppendClick(nil, Click{ClickID: "k", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: MinEventTS}), "ad_id"},
		{"score of the wrong wire type", rawRecord(KindClick, inner(AppendClick(nil, clicks[0])), []byte{8 << 3, 1}), "field 8 has wire type 0"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeClick(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
	badVerdict := AppendFraudVerdict(nil, FraudVerdict{"k", "a", 9, "", MinEventTS})
	if _, err := DecodeFraudVerdict(badVerdict); err == nil || !strings.Contains(err.Error(), "verdict") {
		t.Errorf("got %v; want a verdict error", err)
	}
}

func FuzzParseClickJSON(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`{"click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios","fraud_score":0.3}`,
		`{"type":"click","click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios","ts":"2026-11-30T11:59:00Z"}`,
		`{"fraud_score":1e400}`, `[]`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseClickJSON(b, false, now, testBounds)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %T %v; want a *FieldError", err, err)
			}
			return
		}
		if err := c.Validate(now, testBounds); err != nil {
			t.Fatalf("accepted an invalid click %+v: %v", c, err)
		}
		back, err := DecodeClick(AppendClick(nil, c))
		if err != nil || back != c {
			t.Fatalf("wire round trip: got %+v, %v; want %+v", back, err, c)
		}
	})
}

func FuzzParseFraudVerdictJSON(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`{"click_id":"k1","ad_id":"a1","verdict":"fraud","reason":"bot","decided_at":"2026-11-30T11:59:00Z"}`,
		`{"click_id":"c1.k1.mi0h3q80.AAAAAAAAAAAAAAAA.AAAAAAAAAAAAAAAAAAAAAA.ad-1","verdict":"valid","decided_at":1796039940000}`,
		`{"reason":"\u00e9"}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseFraudVerdictJSON(b, now, testBounds)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %T %v; want a *FieldError", err, err)
			}
			return
		}
		if err := v.Validate(now, testBounds); err != nil {
			t.Fatalf("accepted an invalid verdict %+v: %v", v, err)
		}
		back, err := DecodeFraudVerdict(AppendFraudVerdict(nil, v))
		if err != nil || back != v {
			t.Fatalf("wire round trip: got %+v, %v; want %+v", back, err, v)
		}
	})
}

func FuzzParseEventJSON(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, s := range []string{
		`{"type":"view","item_id":"i1","viewer_id":"u1"}`,
		`{"type":"click","click_id":"k1","ad_id":"a1","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"}`,
		`{"type":"click"}`, `{"type":5}`, `{}`,
		`{"type":"view_count","item_id":"i1","second":1796039940,"count":5,"source_id":"e","seq":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseEventJSON(b, now, testBounds)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %T %v; want a *FieldError", err, err)
			}
			return
		}
		switch ev.Kind {
		case KindView:
			err = ev.View.Validate(now, testBounds)
		case KindClick:
			err = ev.Click.Validate(now, testBounds)
		case KindViewCount:
			err = ev.ViewCount.Validate(now, testBounds)
		default:
			t.Fatalf("got kind %s for an accepted line", ev.Kind)
		}
		if err != nil {
			t.Fatalf("accepted an invalid %s: %v", ev.Kind, err)
		}
	})
}

func FuzzDecodeClick(f *testing.F) {
	f.Add(AppendClick(nil, Click{ClickID: "k", AdID: "a", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: MinEventTS, FraudScore: 0.5, HasFraudScore: true}))
	f.Add(AppendFraudVerdict(nil, FraudVerdict{"k", "a", VerdictFraud, "r", MinEventTS}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := DecodeClick(b); err == nil {
			if back, err := DecodeClick(AppendClick(nil, c)); err != nil || back != c {
				t.Fatalf("click round trip: got %+v, %v; want %+v", back, err, c)
			}
		}
		if v, err := DecodeFraudVerdict(b); err == nil {
			if back, err := DecodeFraudVerdict(AppendFraudVerdict(nil, v)); err != nil || back != v {
				t.Fatalf("verdict round trip: got %+v, %v; want %+v", back, err, v)
			}
		}
	})
}

func TestRecordAdID(t *testing.T) {
	click := Click{ClickID: "k", AdID: "ad-7", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: MinEventTS}
	verdict := FraudVerdict{ClickID: "k", AdID: "ad-7", Verdict: VerdictFraud, Reason: "bot", DecidedAt: MinEventTS}
	edit := func(f func(*Click)) []byte {
		c := click
		f(&c)
		return AppendClick(nil, c)
	}
	tests := []struct {
		name   string
		b      []byte
		wantAd string // "" for none
	}{
		{"click", AppendClick(nil, click), "ad-7"},
		{"verdict", AppendFraudVerdict(nil, verdict), "ad-7"},
		{"click refused for its time", edit(func(c *Click) { c.TS = 0 }), "ad-7"},
		{"click refused for its device", edit(func(c *Click) { c.Device = "" }), "ad-7"},
		{"verdict refused for its verdict", AppendFraudVerdict(nil, FraudVerdict{ClickID: "k", AdID: "ad-7", Verdict: 9, DecidedAt: MinEventTS}), "ad-7"},
		{"cut", AppendClick(nil, click)[:12], ""},
		{"empty ad", edit(func(c *Click) { c.AdID = "" }), ""},
		{"invalid ad", edit(func(c *Click) { c.AdID = "a/b" }), ""},
		{"view", AppendView(nil, View{ItemID: "ad-7", ViewerID: "v", TS: MinEventTS}), ""},
		{"not a record", append([]byte{9}, AppendClick(nil, click)[1:]...), ""},
		{"version 1", appendClickV1(nil, click), "ad-7"},
		{"garbage", []byte("junk"), ""},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad, ok := RecordAdID(tt.b)
			if ad != tt.wantAd || ok != (tt.wantAd != "") {
				t.Errorf("got %q, %v; want %q, %v", ad, ok, tt.wantAd, tt.wantAd != "")
			}
		})
	}
}

func FuzzRecordAdID(f *testing.F) {
	f.Add(AppendClick(nil, Click{ClickID: "k", AdID: "a", CampaignID: "c", UserHash: "u", IPHash: "i", Device: "d", TS: MinEventTS}))
	f.Add(AppendFraudVerdict(nil, FraudVerdict{"k", "a", VerdictFraud, "r", MinEventTS}))
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ad, ok := RecordAdID(b)
		if ok != (ad != "") || (ok && CheckID("ad_id", ad, true) != nil) {
			t.Fatalf("got %q, %v; want a valid ad id exactly when ok", ad, ok)
		}
		// What the decoders accept names its ad.
		if c, err := DecodeClick(b); err == nil && (!ok || ad != c.AdID) {
			t.Fatalf("click of ad %q: got %q, %v", c.AdID, ad, ok)
		}
		if v, err := DecodeFraudVerdict(b); err == nil && (!ok || ad != v.AdID) {
			t.Fatalf("verdict of ad %q: got %q, %v", v.AdID, ad, ok)
		}
	})
}
