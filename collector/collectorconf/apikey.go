package collectorconf

import (
	"fmt"
	"strconv"
	"strings"
)

// MinUserTokenKey is the shortest accepted collector.auth.user_token_key in bytes: an HMAC-SHA256
// key shorter than the hash output is weaker than the hash.
const MinUserTokenKey = 32

// APIKey is one producer key as configured in collector.auth.keys: the secret itself is never
// configured, only its SHA-256.
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

// UnmarshalText reads one key in its compact form, so the configuration loader decodes a flag's
// or the environment's list element by element (YAML maps decode field by field).
func (k *APIKey) UnmarshalText(b []byte) error {
	parsed, err := ParseAPIKey(string(b))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}

// APIKeys is collector.auth.keys: a YAML list of keys, or in a flag or the environment their
// compact forms, comma-separated.
type APIKeys []APIKey

// UnmarshalText reads a comma-separated list of compact keys (an environment variable); empty
// entries are skipped.
func (ks *APIKeys) UnmarshalText(b []byte) error {
	var keys APIKeys
	for i, s := range strings.Split(string(b), ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		k, err := ParseAPIKey(s)
		if err != nil {
			return fmt.Errorf("key %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	*ks = keys
	return nil
}
