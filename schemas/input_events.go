package schemas

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The kinds of posted objects: each one's keys for the decoder (input.go), and what turns the
// decoded values into a checked event. Indexes name the keys in inputValues.

const (
	viewType = iota
	viewItem
	viewViewer
	viewEvent
	viewTS
)

var viewShape = newInputShape([]inputKey{
	viewType: {"type", textValue}, viewItem: {"item_id", textValue}, viewViewer: {"viewer_id", textValue},
	viewEvent: {"event_id", textValue}, viewTS: {"ts", timeValue},
})

const (
	clickType = iota
	clickID
	clickAd
	clickCampaign
	clickUser
	clickIP
	clickDevice
	clickTS
	clickScore
)

var clickShape = newInputShape([]inputKey{
	clickType: {"type", textValue}, clickID: {"click_id", textValue}, clickAd: {"ad_id", textValue},
	clickCampaign: {"campaign_id", textValue}, clickUser: {"user_hash", textValue}, clickIP: {"ip_hash", textValue},
	clickDevice: {"device", textValue}, clickTS: {"ts", timeValue}, clickScore: {"fraud_score", numberValue},
})

const (
	verdictClick = iota
	verdictAd
	verdictVerdict
	verdictReason
	verdictDecidedAt
)

var verdictShape = newInputShape([]inputKey{
	verdictClick: {"click_id", textValue}, verdictAd: {"ad_id", textValue}, verdictVerdict: {"verdict", textValue},
	verdictReason: {"reason", textValue}, verdictDecidedAt: {"decided_at", timeValue},
})

// ParseViewJSON decodes and validates one view posted as JSON. With typeRequired, the object
// must carry "type":"view" (NDJSON batches mix types); without it, a type is optional. An absent
// ts is now.
func ParseViewJSON(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (View, error) {
	var in inputValues
	if err := viewShape.decode(b, &in); err != nil {
		return View{}, err
	}
	return viewOf(&in, typeRequired, now, bounds)
}

// viewOf checks a decoded view and turns it into a View.
func viewOf(in *inputValues, typeRequired bool, now time.Time, bounds TimeBounds) (View, error) {
	if err := checkType(in[viewType], "view", typeRequired); err != nil {
		return View{}, err
	}
	v := View{ItemID: in[viewItem], ViewerID: in[viewViewer], EventID: in[viewEvent]}
	var err error
	if v.TS, err = timeOr(in[viewTS], "ts", now.UnixMilli()); err != nil {
		return View{}, err
	}
	return v, v.Validate(now, bounds)
}

// ParseClickJSON decodes and validates one click posted as JSON (the rules of ParseViewJSON:
// with typeRequired the object must carry "type":"click"; an absent ts is now). The click id's
// signature is not checked here (ClickIDKeys.VerifyClick).
func ParseClickJSON(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (Click, error) {
	var in inputValues
	if err := clickShape.decode(b, &in); err != nil {
		return Click{}, err
	}
	return clickOf(&in, typeRequired, now, bounds)
}

// clickOf checks a decoded click and turns it into a Click.
func clickOf(in *inputValues, typeRequired bool, now time.Time, bounds TimeBounds) (Click, error) {
	if err := checkType(in[clickType], "click", typeRequired); err != nil {
		return Click{}, err
	}
	c := Click{ClickID: in[clickID], AdID: in[clickAd], CampaignID: in[clickCampaign], UserHash: in[clickUser], IPHash: in[clickIP], Device: in[clickDevice]}
	var err error
	if c.TS, err = timeOr(in[clickTS], "ts", now.UnixMilli()); err != nil {
		return Click{}, err
	}
	if raw := in[clickScore]; raw != "" {
		// Only a JSON number parses: strings keep their quotes, true and false are no float.
		if c.FraudScore, err = strconv.ParseFloat(raw, 64); err != nil {
			return Click{}, &FieldError{"fraud_score", "is not a number; want a number from 0 to 1"}
		}
		c.HasFraudScore = true
	}
	return c, c.Validate(now, bounds)
}

// ParseFraudVerdictJSON decodes and validates one fraud verdict posted as JSON. decided_at is
// required (RFC 3339 or Unix milliseconds). ad_id may be left out when the click id is signed:
// the id's ad is then used (unverified; the collector verifies it). When both are given they
// must agree.
func ParseFraudVerdictJSON(b []byte, now time.Time, bounds TimeBounds) (FraudVerdict, error) {
	var in inputValues
	if err := verdictShape.decode(b, &in); err != nil {
		return FraudVerdict{}, err
	}
	v := FraudVerdict{ClickID: in[verdictClick], AdID: in[verdictAd], Reason: in[verdictReason]}
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
	if v.Verdict, ok = ParseVerdict(in[verdictVerdict]); !ok {
		return FraudVerdict{}, &FieldError{"verdict", fmt.Sprintf("got %q; want \"fraud\" or \"valid\"", in[verdictVerdict])}
	}
	if in[verdictDecidedAt] == "" {
		return FraudVerdict{}, &FieldError{"decided_at", "is required"}
	}
	var err error
	if v.DecidedAt, err = timeOr(in[verdictDecidedAt], "decided_at", 0); err != nil {
		return FraudVerdict{}, err
	}
	return v, v.Validate(now, bounds)
}

// checkType checks an object's type against want; an absent type is refused when required.
func checkType(typ, want string, required bool) error {
	if typ == want || typ == "" && !required {
		return nil
	}
	return typeError(typ, want)
}

// typeError is checkType's answer for a type that is not want.
func typeError(typ, want string) error {
	if typ == "" {
		return &FieldError{"type", fmt.Sprintf("is required (%q)", want)}
	}
	return &FieldError{"type", fmt.Sprintf("got %q; want %q", typ, want)}
}

// timeOr reads the timestamp key field kept as raw JSON, or returns absent when there is none.
func timeOr(raw, field string, absent int64) (int64, error) {
	if raw == "" {
		return absent, nil
	}
	ts, err := parseTSJSON(raw)
	if err != nil {
		return 0, &FieldError{field, err.Error()}
	}
	return ts, nil
}

// Event is one line of an NDJSON batch: a view, a click or a view count, as Kind says.
type Event struct {
	Kind      Kind
	View      View
	Click     Click
	ViewCount ViewCount
}

// ParseEventJSON decodes and validates one line of a POST /v1/events batch, which must carry
// "type":"view", "type":"click" or "type":"view_count". Plain views and clicks take the
// decoder's fast path; everything else is dispatched on its type.
func ParseEventJSON(b []byte, now time.Time, bounds TimeBounds) (Event, error) {
	var in inputValues
	if viewShape.decodeFast(b, &in) && in[viewType] != "click" && in[viewType] != "view_count" {
		v, err := viewOf(&in, true, now, bounds)
		return Event{Kind: KindView, View: v}, err
	}
	if clickShape.decodeFast(b, &in) && in[clickType] == "click" {
		c, err := clickOf(&in, true, now, bounds)
		return Event{Kind: KindClick, Click: c}, err
	}
	// Only the type is read here; ill-formed input goes to the view decoder, whose errors say
	// what is wrong with it.
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
	v, err := ParseViewJSON(b, true, now, bounds)
	return Event{Kind: KindView, View: v}, err
}
