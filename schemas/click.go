package schemas

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Click is one click on an ad. ClickID is minted when the ad is rendered (see ClickIDKeys) and
// travels in the click URL, so a double tap or a browser retry carries the same id; TS is the
// event time in Unix milliseconds. FraudScore, when HasFraudScore, is the ad server's score in
// [0, 1]; above the aggregator's configured threshold a click is counted but not billable.
type Click struct {
	ClickID       string
	AdID          string
	CampaignID    string
	UserHash      string
	IPHash        string
	Device        string
	TS            int64
	FraudScore    float64
	HasFraudScore bool
}

// Verdict is the fraud system's decision on one click.
type Verdict uint8

const (
	VerdictFraud Verdict = 1
	VerdictValid Verdict = 2
)

func (v Verdict) String() string {
	switch v {
	case VerdictFraud:
		return "fraud"
	case VerdictValid:
		return "valid"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// ParseVerdict reads "fraud" or "valid".
func ParseVerdict(s string) (Verdict, bool) {
	switch s {
	case "fraud":
		return VerdictFraud, true
	case "valid":
		return VerdictValid, true
	}
	return 0, false
}

// FraudVerdict is the fraud system's decision on a click, which may arrive minutes or hours
// after the click, or more than once; the latest decided_at wins. AdID is the click's ad: it
// keys the record in the log so the verdict lands in the partition that counted the click.
// DecidedAt is in Unix milliseconds.
type FraudVerdict struct {
	ClickID   string
	AdID      string
	Verdict   Verdict
	Reason    string
	DecidedAt int64
}

// MaxReasonLen bounds a verdict's reason in bytes.
const MaxReasonLen = 256

// checkStored validates a click read back from the log: the id rules, the fixed time range and
// the score's range.
func (c Click) checkStored() error {
	for _, f := range []struct {
		name, v string
	}{{"click_id", c.ClickID}, {"ad_id", c.AdID}, {"campaign_id", c.CampaignID}, {"user_hash", c.UserHash}, {"ip_hash", c.IPHash}, {"device", c.Device}} {
		if err := CheckID(f.name, f.v, true); err != nil {
			return err
		}
	}
	if c.HasFraudScore && !(c.FraudScore >= 0 && c.FraudScore <= 1) {
		return &FieldError{"fraud_score", fmt.Sprintf("is %v; want a number from 0 to 1", c.FraudScore)}
	}
	if !c.HasFraudScore && c.FraudScore != 0 {
		return &FieldError{"fraud_score", "is set without being present"}
	}
	return checkEventTS(c.TS)
}

// Validate checks c's fields and its time against b at now (the rules of View.Validate). It does
// not check the click id's signature: that needs the keys (ClickIDKeys.Verify).
func (c Click) Validate(now time.Time, b TimeBounds) error {
	if err := c.checkStored(); err != nil {
		return err
	}
	return checkTS(c.TS, now, b)
}

// checkStored validates a verdict read back from the log.
func (v FraudVerdict) checkStored() error {
	if err := CheckID("click_id", v.ClickID, true); err != nil {
		return err
	}
	if err := CheckID("ad_id", v.AdID, true); err != nil {
		return err
	}
	if v.Verdict != VerdictFraud && v.Verdict != VerdictValid {
		return &FieldError{"verdict", fmt.Sprintf("is %s; want \"fraud\" or \"valid\"", v.Verdict)}
	}
	if err := checkReason(v.Reason); err != nil {
		return err
	}
	if v.DecidedAt < MinEventTS || v.DecidedAt >= MaxEventTS {
		return &FieldError{"decided_at", fmt.Sprintf("is %d; want a time from 2000-01-01 to 2100-01-01 UTC", v.DecidedAt)}
	}
	return nil
}

// Validate checks v's fields; decided_at may lie any time in the past (verdicts come late) but
// at most b.Future ahead of now.
func (v FraudVerdict) Validate(now time.Time, b TimeBounds) error {
	if err := v.checkStored(); err != nil {
		return err
	}
	if d := time.UnixMilli(v.DecidedAt).Sub(now); d > b.Future {
		return &FieldError{"decided_at", fmt.Sprintf("is %s in the future; at most %s allowed", d.Round(time.Second), b.Future)}
	}
	return nil
}

// checkReason allows free text of at most MaxReasonLen bytes of UTF-8 without control
// characters, so it prints safely in logs and reports.
func checkReason(s string) error {
	if len(s) > MaxReasonLen {
		return &FieldError{"reason", fmt.Sprintf("is %d bytes; at most %d allowed", len(s), MaxReasonLen)}
	}
	for i, r := range s {
		if r == utf8.RuneError || r < ' ' || r == 0x7f {
			return &FieldError{"reason", fmt.Sprintf("has an invalid or control character at byte %d", i)}
		}
	}
	return nil
}

// RecordAdID returns the ad id a click or fraud-verdict record value names, checking only that
// field, so that a record refused for another field still says its ad: reports on
// refused records (dead letters) use it. ok is false when the value is not a record of either
// kind up to its ad id, or the ad id is not a valid id.
func RecordAdID(b []byte) (ad string, ok bool) {
	kind := RecordKind(b)
	if kind != KindClick && kind != KindFraudVerdict {
		return "", false
	}
	ad, ok = recordAdID(b, kind)
	if !ok || CheckID("ad_id", ad, true) != nil {
		return "", false
	}
	return ad, true
}
