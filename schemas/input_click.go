package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// inputClick is the JSON shape of a posted click.
type inputClick struct {
	Type       string          `json:"type"`
	ClickID    string          `json:"click_id"`
	AdID       string          `json:"ad_id"`
	CampaignID string          `json:"campaign_id"`
	UserHash   string          `json:"user_hash"`
	IPHash     string          `json:"ip_hash"`
	Device     string          `json:"device"`
	TS         json.RawMessage `json:"ts"`
	FraudScore json.RawMessage `json:"fraud_score"`
}

// inputVerdict is the JSON shape of a posted fraud verdict.
type inputVerdict struct {
	ClickID   string          `json:"click_id"`
	AdID      string          `json:"ad_id"`
	Verdict   string          `json:"verdict"`
	Reason    string          `json:"reason"`
	DecidedAt json.RawMessage `json:"decided_at"`
}

// decodeStrict decodes one JSON object from b into dst, rejecting unknown fields and trailing
// data, with errors as FieldErrors.
func decodeStrict(b []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	// Decoder.More would miss a stray closing bracket after the object.
	if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		return &FieldError{"body", "has data after the JSON object"}
	}
	return nil
}

// ParseClickJSON decodes and validates one click posted as JSON (the rules of ParseViewJSON:
// with typeRequired the object must carry "type":"click"; an absent ts is now). The click id's
// signature is not checked here (ClickIDKeys.VerifyClick).
func ParseClickJSON(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (Click, error) {
	in, ok := decodeClickFast(b)
	if !ok {
		return parseClickJSONStd(b, typeRequired, now, bounds)
	}
	return in.click(typeRequired, now, bounds)
}

// parseClickJSONStd is ParseClickJSON on encoding/json alone: the fallback, and the reference
// the fast path is fuzzed against.
func parseClickJSONStd(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (Click, error) {
	var in inputClick
	if err := decodeStrict(b, &in); err != nil {
		return Click{}, err
	}
	return in.click(typeRequired, now, bounds)
}

// click checks a decoded click and turns it into a Click.
func (in *inputClick) click(typeRequired bool, now time.Time, bounds TimeBounds) (Click, error) {
	switch {
	case in.Type == "" && typeRequired:
		return Click{}, &FieldError{"type", `is required ("click")`}
	case in.Type != "" && in.Type != "click":
		return Click{}, &FieldError{"type", fmt.Sprintf("got %q; want \"click\"", in.Type)}
	}
	c := Click{ClickID: in.ClickID, AdID: in.AdID, CampaignID: in.CampaignID, UserHash: in.UserHash, IPHash: in.IPHash, Device: in.Device, TS: now.UnixMilli()}
	if len(in.TS) > 0 && string(in.TS) != "null" {
		ts, err := parseTSJSON(in.TS)
		if err != nil {
			return Click{}, &FieldError{"ts", err.Error()}
		}
		c.TS = ts
	}
	if len(in.FraudScore) > 0 && string(in.FraudScore) != "null" {
		f, err := strconv.ParseFloat(string(in.FraudScore), 64)
		if err != nil || in.FraudScore[0] == '"' {
			return Click{}, &FieldError{"fraud_score", "is not a number; want a number from 0 to 1"}
		}
		c.FraudScore, c.HasFraudScore = f, true
	}
	return c, c.Validate(now, bounds)
}

// ParseFraudVerdictJSON decodes and validates one fraud verdict posted as JSON. decided_at is
// required (RFC 3339 or Unix milliseconds). ad_id may be left out when the click id is signed:
// the id's ad is then used (unverified; the collector verifies it). When both are given they
// must agree.
func ParseFraudVerdictJSON(b []byte, now time.Time, bounds TimeBounds) (FraudVerdict, error) {
	var in inputVerdict
	if err := decodeStrict(b, &in); err != nil {
		return FraudVerdict{}, err
	}
	v := FraudVerdict{ClickID: in.ClickID, AdID: in.AdID, Reason: in.Reason}
	if err := CheckID("click_id", v.ClickID, true); err != nil {
		return FraudVerdict{}, err
	}
	if info, ok := ParseClickID(v.ClickID); ok {
		switch {
		case v.AdID == "":
			v.AdID = info.AdID
		case v.AdID != info.AdID:
			return FraudVerdict{}, &FieldError{"ad_id", fmt.Sprintf("is %q but the click id was minted for ad %q", v.AdID, info.AdID)}
		}
	} else if v.AdID == "" {
		return FraudVerdict{}, &FieldError{"ad_id", "is required for a click id that is not signed (the ad routes the verdict to its click's partition)"}
	}
	var ok bool
	if v.Verdict, ok = ParseVerdict(in.Verdict); !ok {
		return FraudVerdict{}, &FieldError{"verdict", fmt.Sprintf("got %q; want \"fraud\" or \"valid\"", in.Verdict)}
	}
	if len(in.DecidedAt) == 0 || string(in.DecidedAt) == "null" {
		return FraudVerdict{}, &FieldError{"decided_at", "is required"}
	}
	ts, err := parseTSJSON(in.DecidedAt)
	if err != nil {
		return FraudVerdict{}, &FieldError{"decided_at", err.Error()}
	}
	v.DecidedAt = ts
	return v, v.Validate(now, bounds)
}

// Event is one line of an NDJSON batch: a view, a click or a view count, as Kind says.
type Event struct {
	Kind      Kind
	View      View
	Click     Click
	ViewCount ViewCount
}

// ParseEventJSON decodes and validates one line of a POST /v1/events batch, which must carry
// "type":"view", "type":"click" or "type":"view_count". Views take ParseViewJSON's fast path;
// everything else is dispatched on its type.
func ParseEventJSON(b []byte, now time.Time, bounds TimeBounds) (Event, error) {
	if in, ok := decodeInputFast(b); ok && in.Type != "click" && in.Type != "view_count" {
		v, err := in.view(true, now, bounds)
		return Event{Kind: KindView, View: v}, err
	}
	if in, ok := decodeClickFast(b); ok && in.Type == "click" {
		c, err := in.click(true, now, bounds)
		return Event{Kind: KindClick, Click: c}, err
	}
	// Only the type is read here; ill-formed input goes to the view parser, whose errors say what
	// is wrong with it.
	var peek struct {
		Type *string `json:"type"`
	}
	if json.Unmarshal(b, &peek) == nil && peek.Type != nil {
		switch *peek.Type {
		case "click":
			c, err := ParseClickJSON(b, true, now, bounds)
			return Event{Kind: KindClick, Click: c}, err
		case "view_count":
			c, err := ParseViewCountJSON(b, true, now, bounds)
			return Event{Kind: KindViewCount, ViewCount: c}, err
		case "view", "":
		default:
			return Event{}, &FieldError{"type", fmt.Sprintf("got %q; want \"view\", \"click\" or \"view_count\"", *peek.Type)}
		}
	}
	v, err := parseViewJSONStd(b, true, now, bounds)
	return Event{Kind: KindView, View: v}, err
}

// decodeClickFast is decodeInputFast for clicks: one flat object of the click's keys (exact
// spelling, each at most once) with plain string values or null, ts also an integer and
// fraud_score a plain JSON number, and only whitespace around. For such input it yields what
// encoding/json would; for any other it reports false and encoding/json decides.
func decodeClickFast(b []byte) (in inputClick, ok bool) {
	s := string(b)
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return in, false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return in, skipSpace(s, i+1) == len(s)
	}
	var seen uint16
	for {
		key, j, ok := plainString(s, i)
		if !ok {
			return in, false
		}
		i = skipSpace(s, j)
		if i == len(s) || s[i] != ':' {
			return in, false
		}
		i = skipSpace(s, i+1)
		var bit uint16
		var dst *string
		var raw *json.RawMessage
		switch key {
		case "type":
			bit, dst = 1, &in.Type
		case "click_id":
			bit, dst = 2, &in.ClickID
		case "ad_id":
			bit, dst = 4, &in.AdID
		case "campaign_id":
			bit, dst = 8, &in.CampaignID
		case "user_hash":
			bit, dst = 16, &in.UserHash
		case "ip_hash":
			bit, dst = 32, &in.IPHash
		case "device":
			bit, dst = 64, &in.Device
		case "ts":
			bit, raw = 128, &in.TS
		case "fraud_score":
			bit, raw = 256, &in.FraudScore
		default:
			return in, false
		}
		if seen&bit != 0 {
			return in, false
		}
		seen |= bit
		switch {
		case strings.HasPrefix(s[i:], "null"):
			j = i + len("null")
			if raw != nil {
				*raw = b[i:j]
			}
		case dst != nil:
			if *dst, j, ok = plainString(s, i); !ok {
				return in, false
			}
		case key == "ts":
			if _, j, ok = plainString(s, i); !ok {
				if j, ok = jsonInt(s, i); !ok {
					return in, false
				}
			}
			*raw = b[i:j]
		default:
			if j, ok = jsonNumber(s, i); !ok {
				return in, false
			}
			*raw = b[i:j]
		}
		i = skipSpace(s, j)
		if i == len(s) {
			return in, false
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return in, skipSpace(s, i+1) == len(s)
		default:
			return in, false
		}
	}
}

// jsonNumber returns the index after a JSON number at s[i] (integer part, optional fraction,
// optional exponent, as the JSON grammar has them).
func jsonNumber(s string, i int) (int, bool) {
	j, ok := jsonInt(s, i)
	if !ok {
		return i, false
	}
	if j < len(s) && s[j] == '.' {
		k := j + 1
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k == j+1 {
			return i, false
		}
		j = k
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		d := k
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k == d {
			return i, false
		}
		j = k
	}
	return j, true
}
