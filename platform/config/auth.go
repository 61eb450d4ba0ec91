package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
)

// Auth modes of collector.auth.enabled.
const (
	AuthAuto = "auto"
	AuthOn   = "on"
	AuthOff  = "off"
)

// scopeList names the scopes an API key may hold. The collector's auth package defines what
// each allows; the names are repeated here so a misspelt scope stops the start naming the key.
const scopeList = "ingest, read, like, fraud, billing, admin"

// MinUserTokenKey is the shortest accepted collector.auth.user_token_key in bytes: an HMAC-SHA256
// key shorter than the hash output is weaker than the hash.
const MinUserTokenKey = 32

// CollectorAuth is the collector's API access control (docs/SECURITY.md).
type CollectorAuth struct {
	Enabled      string   `mapstructure:"enabled"`
	Keys         []APIKey `mapstructure:"keys"`
	UserTokenKey string   `mapstructure:"user_token_key"`
}

// APIKey is one producer key: the secret itself is never configured, only its SHA-256.
type APIKey struct {
	ID     string   `mapstructure:"id"`
	SHA256 string   `mapstructure:"sha256"` // hex SHA-256 of the secret the client sends
	Scopes []string `mapstructure:"scopes"`
	Rate   float64  `mapstructure:"rate"`  // sustained requests per second
	Burst  int      `mapstructure:"burst"` // requests allowed at once above the rate
}

// ParseAPIKey reads the compact form of a key used in flags and environment variables:
// id:sha256:scope+scope:rate:burst, e.g. web:9f86...:ingest+read:100:200.
func ParseAPIKey(s string) (APIKey, error) {
	f := strings.Split(strings.TrimSpace(s), ":")
	if len(f) != 5 {
		return APIKey{}, fmt.Errorf("got %d ':'-separated fields; want id:sha256:scope+scope:rate:burst", len(f))
	}
	k := APIKey{ID: f[0], SHA256: f[1], Scopes: strings.Split(f[2], "+")}
	var err error
	if k.Rate, err = strconv.ParseFloat(f[3], 64); err != nil {
		return APIKey{}, fmt.Errorf("rate %q: want a number of requests per second", f[3])
	}
	if k.Burst, err = strconv.Atoi(f[4]); err != nil {
		return APIKey{}, fmt.Errorf("burst %q: want a whole number of requests", f[4])
	}
	return k, nil
}

// apiKeyHook decodes keys from their compact string form: a comma-separated list (environment)
// or one key (an element of a flag's list). YAML maps decode field by field without it.
func apiKeyHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String {
		return data, nil
	}
	switch to {
	case reflect.TypeOf(APIKey{}):
		return ParseAPIKey(data.(string))
	case reflect.TypeOf([]APIKey{}):
		var keys []APIKey
		for i, s := range strings.Split(data.(string), ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			k, err := ParseAPIKey(s)
			if err != nil {
				return nil, fmt.Errorf("key %d: %w", i+1, err)
			}
			keys = append(keys, k)
		}
		return keys, nil
	}
	return data, nil
}

// AuthOn reports whether the collector checks API keys: always when on, never when off, and in
// auto mode unless the API listens on loopback only.
func (c Collector) AuthOn() bool {
	switch c.Auth.Enabled {
	case AuthOn:
		return true
	case AuthOff:
		return false
	default:
		return !Loopback(c.Addr)
	}
}

// Loopback reports whether the listen address hostport accepts connections from this machine
// only: its host is "localhost" or a loopback IP. An empty host (":8080") listens on every
// interface; other names are not resolved, since a name may later point elsewhere.
func Loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c Collector) validateAuth(bad func(string, string, ...any)) {
	checkHostPort(bad, "collector.admin_addr", c.AdminAddr)
	switch c.Auth.Enabled {
	case AuthAuto, AuthOn, AuthOff:
	default:
		bad("collector.auth.enabled", "got %q; want auto, on or off", c.Auth.Enabled)
		return
	}
	if c.Auth.Enabled == AuthOff && !Loopback(c.Addr) {
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
		if k.ID == "" || !identifier(strings.NewReplacer("-", "", ".", "").Replace(k.ID)) {
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
