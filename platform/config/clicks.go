package config

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// The clicks section is shared: the collector verifies and mints click ids with its keys, the
// aggregator's click path and the nightly click job count with its dedupe and fraud rules, and
// they must agree.

// Clicks configures the ad-click path: signed click ids at the collector and the streaming
// count in the aggregator (docs/API.md, docs/SECURITY.md).
type Clicks struct {
	SigningKey          string        `mapstructure:"signing_key"`
	Keys                []string      `mapstructure:"keys"`
	MaxRenderAge        time.Duration `mapstructure:"max_render_age"`
	Group               string        `mapstructure:"group"`
	DedupeWindow        time.Duration `mapstructure:"dedupe_window"`
	DedupeGrace         time.Duration `mapstructure:"dedupe_grace"`
	FraudScoreThreshold float64       `mapstructure:"fraud_score_threshold"`
	CountedTTL          time.Duration `mapstructure:"counted_ttl"`
}

// ClickIDKey is one configured click-id key: its id and secret.
type ClickIDKey struct {
	ID     string
	Secret []byte
}

// ClickIDKeys decodes clicks.keys ("id:secret", the secret in unpadded or padded base64url or
// base64); nil when none is configured.
func (c Clicks) ClickIDKeys() ([]ClickIDKey, error) {
	var out []ClickIDKey
	for _, k := range c.Keys {
		id, secret, ok := strings.Cut(strings.TrimSpace(k), ":")
		if !ok || id == "" {
			return nil, fmt.Errorf("got an entry without id:secret; want id:base64url-secret")
		}
		var b []byte
		var err error
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
			if b, err = enc.DecodeString(secret); err == nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: secret is not base64", id)
		}
		out = append(out, ClickIDKey{ID: id, Secret: b})
	}
	return out, nil
}

func clickSettings() []Setting {
	return []Setting{
		{"clicks.signing_key", "", "id of the clicks.keys entry new click ids are signed with; empty: click ids are not signed and unsigned ids are accepted (docs/SECURITY.md)"},
		{"clicks.keys", []string{}, "click-id keys as id:secret (secret: at least 32 random bytes in base64url; make one with: head -c32 /dev/urandom | basenc --base64url); clicks verify against every key, so keep an old key listed while its ids may still be clicked"},
		{"clicks.max_render_age", 24 * time.Hour, "with a signing key: a click on an ad rendered longer ago than this is rejected"},
		{"clicks.group", "tally-aggregator-clicks", "Kafka consumer group of the aggregators' click path (topics clicks and fraud_verdicts)"},
		{"clicks.dedupe_window", 10 * time.Minute, "a click id counts once within this much event time"},
		{"clicks.dedupe_grace", 10 * time.Minute, "how far behind the partition's newest click a late click is still deduplicated"},
		{"clicks.fraud_score_threshold", 1.0, "clicks whose fraud_score is above this are counted but not billable; 1 disables"},
		{"clicks.counted_ttl", 8 * 24 * time.Hour, "retention of the counted clicks late fraud verdicts are resolved against (a verdict for an older click corrects only the nightly report)"},
	}
}

func (c Config) validateClicks(bad Bad) {
	k := c.Clicks
	keys, err := k.ClickIDKeys()
	if err != nil {
		bad("clicks.keys", "%v", err)
	}
	seen := map[string]bool{}
	for _, key := range keys {
		if len(key.Secret) < 32 {
			bad("clicks.keys", "key %q: secret is %d bytes; want at least 32", key.ID, len(key.Secret))
		}
		if seen[key.ID] {
			bad("clicks.keys", "key %q is listed twice", key.ID)
		}
		seen[key.ID] = true
	}
	if k.SigningKey != "" && !seen[k.SigningKey] {
		bad("clicks.signing_key", "got %q; want the id of one of clicks.keys", k.SigningKey)
	}
	if k.SigningKey == "" && len(keys) > 0 {
		bad("clicks.signing_key", "is empty while clicks.keys lists keys; name the key to sign with")
	}
	Positive(bad, "clicks.max_render_age", k.MaxRenderAge)
	if k.Group == "" {
		bad("clicks.group", "must not be empty")
	}
	Positive(bad, "clicks.dedupe_window", k.DedupeWindow)
	if k.DedupeGrace < 0 {
		bad("clicks.dedupe_grace", "got %s; want zero or more", k.DedupeGrace)
	}
	if !(k.FraudScoreThreshold >= 0 && k.FraudScoreThreshold <= 1) {
		bad("clicks.fraud_score_threshold", "got %v; want 0..1 (1 disables)", k.FraudScoreThreshold)
	}
	if k.CountedTTL < 2*24*time.Hour || k.CountedTTL%(24*time.Hour) != 0 {
		bad("clicks.counted_ttl", "got %s; want a whole number of days, at least 2 (e.g. 192h)", k.CountedTTL)
	}
}
