// Package collectorconf is the collector's section of the configuration (collector.*), with its
// part of the clicks section (clickconf.ClickIDs: the click-id keys), and the API keys'
// configured form (apikey.go) that the auth package enforces. It is a leaf of its own so that
// the batch jobs, which read the collector's event-time bounds, load the same sections without
// linking the collector. The sections are plain
// data, filled in once by config.Load.
package collectorconf

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/webguard"
	"github.com/tallypipeline/tally/schemas/clickconf"
)

// Auth modes of collector.auth.enabled.
const (
	AuthAuto = "auto"
	AuthOn   = "on"
	AuthOff  = "off"
)

// scopeList names the scopes an API key may hold. The auth package defines what each allows;
// the names are repeated here so a misspelt scope stops the start naming the key.
const scopeList = "ingest, read, like, fraud, billing, admin"

// Settings is the collector's section of the configuration (collector.*), loaded by
// config.Load beside the shared sections.
type Settings struct {
	Addr         string        `mapstructure:"addr"`
	MaxBodyBytes int           `mapstructure:"max_body_bytes"`
	MaxLines     int           `mapstructure:"max_lines"`
	FutureBound  time.Duration `mapstructure:"future_bound"`
	LateBound    time.Duration `mapstructure:"late_bound"`

	ReadHeaderTimeout   time.Duration `mapstructure:"read_header_timeout"`
	ReadTimeout         time.Duration `mapstructure:"read_timeout"`
	WriteTimeout        time.Duration `mapstructure:"write_timeout"`
	IdleTimeout         time.Duration `mapstructure:"idle_timeout"`
	MaxConcurrentBodies int           `mapstructure:"max_concurrent_bodies"`
	FallbackTimeout     time.Duration `mapstructure:"fallback_timeout"`
	AdminAddr           string        `mapstructure:"admin_addr"`
	Auth                AuthSettings  `mapstructure:"auth"`

	// ClickIDs is the collector's part of the clicks section, loaded beside this one (Sections).
	ClickIDs clickconf.ClickIDs `mapstructure:"-"`
}

// AuthSettings is the collector's API access control (docs/SECURITY.md).
type AuthSettings struct {
	Enabled      string  `mapstructure:"enabled"`
	Keys         APIKeys `mapstructure:"keys"`
	UserTokenKey string  `mapstructure:"user_token_key"`
}

// Name is the section's top-level key.
func (*Settings) Name() string { return "collector" }

// Sections lists the collector's sections for config.Load: collector.* and its part of
// clicks.*.
func (c *Settings) Sections() []config.Section { return []config.Section{c, &c.ClickIDs} }

// Settings declares every collector key once: its default and its one-line help.
func (*Settings) Settings() []config.Setting {
	return []config.Setting{
		{Key: "collector.addr", Default: "127.0.0.1:8080", Help: "collector HTTP listen address (API, /healthz, /readyz, /metrics)"},
		{Key: "collector.max_body_bytes", Default: 4 << 20, Help: "largest accepted request body in bytes (413 beyond)"},
		{Key: "collector.max_lines", Default: 10000, Help: "most events in one POST /v1/events body"},
		{Key: "collector.future_bound", Default: 5 * time.Minute, Help: "events stamped further in the future are rejected"},
		{Key: "collector.late_bound", Default: 24 * time.Hour, Help: "events older than this are rejected"},
		{Key: "collector.read_header_timeout", Default: 5 * time.Second, Help: "bound on reading a request's header; the connection is closed beyond it"},
		{Key: "collector.read_timeout", Default: 30 * time.Second, Help: "bound on reading a whole request, header and body (a body still arriving is cut off with 408)"},
		{Key: "collector.write_timeout", Default: 60 * time.Second, Help: "bound from a request's header to the end of its answer; must exceed collector.read_timeout plus kafka.produce_timeout"},
		{Key: "collector.idle_timeout", Default: 60 * time.Second, Help: "an idle keep-alive connection is closed after this long"},
		{Key: "collector.max_concurrent_bodies", Default: 64, Help: "ingest requests read and handled at once; beyond it ingest answers 503 at once (body memory stays under this times collector.max_body_bytes)"},
		{Key: "collector.fallback_timeout", Default: time.Second, Help: "bound on a count read from ClickHouse while the Redis totals are rebuilt, the wait for a read slot and the query together (ClickHouse stops the query too); beyond it 503 with Retry-After"},
		{Key: "collector.admin_addr", Default: "127.0.0.1:9080", Help: "collector admin listen address (/metrics, /debug/pprof/, /healthz, /readyz) when auth is on; with auth off these stay on collector.addr, which is then loopback"},
		{Key: "collector.auth.enabled", Default: "auto", Help: "API access control: on, off (only allowed when collector.addr is loopback) or auto (on unless collector.addr is loopback); docs/SECURITY.md"},
		{Key: "collector.auth.keys", Default: []string{}, Help: "producer API keys: in YAML a list of {id, sha256, scopes, rate, burst}; in a flag or the environment id:sha256:scope+scope:rate:burst, comma-separated (mint one with: collector keys new)"},
		{Key: "collector.auth.user_token_key", Default: "", Help: "HMAC-SHA256 key (at least 32 bytes) verifying the user tokens (HS256 JWT) that likes require when auth is on"},
	}
}

// Validate checks the collector's settings and names every bad key.
func (c *Settings) Validate(shared *config.Config, bad config.Bad) {
	config.CheckHostPort(bad, "collector.addr", c.Addr)
	if c.MaxBodyBytes < 1024 {
		bad("collector.max_body_bytes", "got %d; want at least 1024", c.MaxBodyBytes)
	}
	if c.MaxLines < 1 {
		bad("collector.max_lines", "got %d; want at least 1", c.MaxLines)
	}
	config.Positive(bad, "collector.future_bound", c.FutureBound)
	config.Positive(bad, "collector.late_bound", c.LateBound)
	config.Positive(bad, "collector.read_header_timeout", c.ReadHeaderTimeout)
	config.Positive(bad, "collector.read_timeout", c.ReadTimeout)
	config.Positive(bad, "collector.idle_timeout", c.IdleTimeout)
	if c.ReadHeaderTimeout > c.ReadTimeout {
		bad("collector.read_header_timeout", "got %s; want at most collector.read_timeout (%s), which includes the header", c.ReadHeaderTimeout, c.ReadTimeout)
	}
	// The write bound runs from the end of the header to the end of the answer: a body read
	// within the read bound must still leave the wait for Kafka its full time.
	if need := c.ReadTimeout + shared.Kafka.ProduceTimeout; c.WriteTimeout <= need {
		bad("collector.write_timeout", "got %s; want more than collector.read_timeout + kafka.produce_timeout (%s), or a request read in time could not be answered", c.WriteTimeout, need)
	}
	if c.MaxConcurrentBodies < 1 {
		bad("collector.max_concurrent_bodies", "got %d; want at least 1", c.MaxConcurrentBodies)
	}
	config.Positive(bad, "collector.fallback_timeout", c.FallbackTimeout)
	c.validateAuth(bad)
}

// AuthOn reports whether the collector checks API keys: always when on, never when off, and in
// auto mode unless the API listens on loopback only.
func (c *Settings) AuthOn() bool {
	switch c.Auth.Enabled {
	case AuthOn:
		return true
	case AuthOff:
		return false
	default:
		return !webguard.LoopbackAddr(c.Addr)
	}
}

func (c *Settings) validateAuth(bad config.Bad) {
	config.CheckHostPort(bad, "collector.admin_addr", c.AdminAddr)
	switch c.Auth.Enabled {
	case AuthAuto, AuthOn, AuthOff:
	default:
		bad("collector.auth.enabled", "got %q; want auto, on or off", c.Auth.Enabled)
		return
	}
	if c.Auth.Enabled == AuthOff && !webguard.LoopbackAddr(c.Addr) {
		bad("collector.auth.enabled", "is off but collector.addr %q is not a loopback address: anyone who reaches it could write and read everything; "+
			"configure collector.auth.keys and set collector.auth.enabled to on or auto, or listen on 127.0.0.1 (docs/SECURITY.md)", c.Addr)
	}
	if k := c.Auth.UserTokenKey; k != "" && len(k) < MinUserTokenKey {
		bad("collector.auth.user_token_key", "is %d bytes; want at least %d random bytes (e.g. `openssl rand -hex 32`)", len(k), MinUserTokenKey)
	}
	ids, hashes := map[string]bool{}, map[string]bool{}
	likes := false
	for i, k := range c.Auth.Keys {
		key := fmt.Sprintf("collector.auth.keys[%d]", i)
		if k.ID == "" || !config.Identifier(strings.NewReplacer("-", "", ".", "").Replace(k.ID)) {
			bad(key+".id", "got %q; want letters, digits, '_', '-' or '.'", k.ID)
		} else if ids[k.ID] {
			bad(key+".id", "%q is used by another key", k.ID)
		}
		ids[k.ID] = true
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
			bad(key+".sha256", "got %q; want the 64 hex digits of the secret's SHA-256 (`collector keys hash`)", k.SHA256)
		} else if h := strings.ToLower(k.SHA256); hashes[h] {
			bad(key+".sha256", "is the hash of another key's secret")
		} else {
			hashes[h] = true
		}
		if len(k.Scopes) == 0 {
			bad(key+".scopes", "is empty; want one or more of %s", scopeList)
		}
		for _, s := range k.Scopes {
			if !knownScope(s) {
				bad(key+".scopes", "has %q; want %s", s, scopeList)
			}
			likes = likes || s == "like"
		}
		if !(k.Rate > 0) {
			bad(key+".rate", "got %g; want more than 0 requests per second", k.Rate)
		}
		if k.Burst < 1 {
			bad(key+".burst", "got %d; want at least 1", k.Burst)
		}
	}
	if !c.AuthOn() {
		return
	}
	if len(c.Auth.Keys) == 0 {
		bad("collector.auth.keys", "is empty but auth is on (collector.auth.enabled %s, collector.addr %q): every request would be refused; "+
			"add keys (`collector keys new`) or listen on 127.0.0.1 (docs/SECURITY.md)", c.Auth.Enabled, c.Addr)
	}
	if likes && c.Auth.UserTokenKey == "" {
		bad("collector.auth.user_token_key", "is empty but a key has the like scope: likes take the user from a token signed with this key")
	}
	if c.AdminAddr == c.Addr {
		bad("collector.admin_addr", "is collector.addr (%q); with auth on, /metrics and /debug/pprof/ need their own address", c.Addr)
	}
}

func knownScope(s string) bool {
	switch s {
	case "ingest", "read", "like", "fraud", "billing", "admin":
		return true
	}
	return false
}
