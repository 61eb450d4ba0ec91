package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
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
	var in inputClick
	if err := decodeStrict(b, &in); err != nil {
		return Click{}, err
	}
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

// Event is one line of an NDJSON batch: a view or a click, as Kind says.
type Event struct {
	Kind  Kind
	View  View
	Click Click
}

// ParseEventJSON decodes and validates one line of a POST /v1/events batch, which must carry
// "type":"view" or "type":"click". Views take ParseViewJSON's fast path; everything else is
// dispatched on its type.
func ParseEventJSON(b []byte, now time.Time, bounds TimeBounds) (Event, error) {
	if in, ok := decodeInputFast(b); ok && in.Type != "click" {
		v, err := in.view(true, now, bounds)
		return Event{Kind: KindView, View: v}, err
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
		case "view", "":
		default:
			return Event{}, &FieldError{"type", fmt.Sprintf("got %q; want \"view\" or \"click\"", *peek.Type)}
		}
	}
	v, err := parseViewJSONStd(b, true, now, bounds)
	return Event{Kind: KindView, View: v}, err
}
