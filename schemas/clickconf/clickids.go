// Package clickconf is the clicks section of the configuration (clicks.*), in two parts under
// the one top-level name: ClickIDs, the keys the collector signs and verifies click ids with,
// and Rules, the click path's consumer group and the counting rules the streaming count and
// batchjob clicks must agree on. It sits with the shared contract because several binaries read
// it: a binary that reads one part loads both, so a file's clicks section is checked whole
// (config.Section), without any component importing another's settings.
package clickconf

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/tallypipeline/tally/platform/config"
)

// ClickIDs is the collector's part of the clicks section: the keys it signs and verifies click
// ids with (docs/API.md, docs/SECURITY.md).
type ClickIDs struct {
	SigningKey   string        `mapstructure:"signing_key"`
	Keys         []string      `mapstructure:"keys"`
	MaxRenderAge time.Duration `mapstructure:"max_render_age"`
}

// ClickIDKey is one configured click-id key: its id and secret.
type ClickIDKey struct {
	ID     string
	Secret []byte
}

// Name is the section's top-level key.
func (*ClickIDs) Name() string { return "clicks" }

// Settings declares the collector's clicks keys once: default and one-line help.
func (*ClickIDs) Settings() []config.Setting {
	return []config.Setting{
		{Key: "clicks.signing_key", Default: "", Help: "id of the clicks.keys entry new click ids are signed with; empty: click ids are not signed and unsigned ids are accepted (docs/SECURITY.md)"},
		{Key: "clicks.keys", Default: []string{}, Help: "click-id keys as id:secret (secret: at least 32 random bytes in base64url; make one with: head -c32 /dev/urandom | basenc --base64url); clicks verify against every key, so keep an old key listed while its ids may still be clicked"},
		{Key: "clicks.max_render_age", Default: 24 * time.Hour, Help: "with a signing key: a click on an ad rendered longer ago than this is rejected"},
	}
}

// ClickIDKeys decodes clicks.keys ("id:secret", the secret in unpadded or padded base64url or
// base64); nil when none is configured.
func (c *ClickIDs) ClickIDKeys() ([]ClickIDKey, error) {
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

// Validate checks the click-id keys and names every bad key.
func (c *ClickIDs) Validate(_ *config.Config, bad config.Bad) {
	keys, err := c.ClickIDKeys()
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
	if c.SigningKey != "" && !seen[c.SigningKey] {
		bad("clicks.signing_key", "got %q; want the id of one of clicks.keys", c.SigningKey)
	}
	if c.SigningKey == "" && len(keys) > 0 {
		bad("clicks.signing_key", "is empty while clicks.keys lists keys; name the key to sign with")
	}
	config.Positive(bad, "clicks.max_render_age", c.MaxRenderAge)
}
