package collectorconf

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/platform/config"
)

const testHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")

func TestAuthKeysFromEveryLayer(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	yaml := "collector:\n  addr: 0.0.0.0:8080\n  auth:\n    user_token_key: " + strings.Repeat("k", 32) + "\n    keys:\n" +
		"      - id: web\n        sha256: " + testHash + "\n        scopes: [ingest, read]\n        rate: 50\n        burst: 100\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	web := APIKey{ID: "web", SHA256: testHash, Scopes: []string{"ingest", "read"}, Rate: 50, Burst: 100}
	app := APIKey{ID: "app", SHA256: strings.ToUpper(testHash[:63]) + "9", Scopes: []string{"like"}, Rate: 2.5, Burst: 5}
	compact := "app:" + app.SHA256 + ":like:2.5:5"
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want APIKeys
	}{
		{"yaml list", nil, []string{"--config", file}, APIKeys{web}},
		{"flag compact", nil, []string{"--config", file, "--collector.auth.keys", compact}, APIKeys{app}},
		{"env compact, two keys", map[string]string{"TALLY_COLLECTOR_AUTH_KEYS": compact + ",web:" + testHash + ":ingest+read:50:100"},
			[]string{"--config", file}, APIKeys{app, web}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c Settings
			if _, err := config.Load("test", tt.args, &c); err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(c.Auth.Keys, tt.want) {
				t.Errorf("got keys %+v; want %+v", c.Auth.Keys, tt.want)
			}
			if !c.AuthOn() {
				t.Error("got auth off on 0.0.0.0 in auto mode; want on")
			}
		})
	}
}

// A collector reachable from the network never starts without access control, and auth that is
// on must be usable: keys present and well formed, a user-token key when a key may like.
func TestAuthStartChecks(t *testing.T) {
	key := "--collector.auth.keys=web:" + testHash + ":ingest:10:10"
	tokenKey := "--collector.auth.user_token_key=" + strings.Repeat("k", 32)
	tests := []struct {
		name   string
		args   []string
		want   string // "" means the start is allowed
		wantOn bool
	}{
		{"loopback default: auth off", nil, "", false},
		{"localhost: auth off", []string{"--collector.addr", "localhost:8080"}, "", false},
		{"ipv6 loopback: auth off", []string{"--collector.addr", "[::1]:8080"}, "", false},
		{"all interfaces without keys", []string{"--collector.addr", "0.0.0.0:8080"}, "collector.auth.keys", true},
		{"empty host without keys", []string{"--collector.addr", ":8080"}, "collector.auth.keys", true},
		{"host name without keys", []string{"--collector.addr", "api.internal:8080"}, "collector.auth.keys", true},
		{"auth off on a public address", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.enabled", "off"}, "collector.auth.enabled: is off but collector.addr", false},
		{"auth off on loopback", []string{"--collector.auth.enabled", "off"}, "", false},
		{"auth on on loopback with a key", []string{"--collector.auth.enabled", "on", key}, "", true},
		{"auth on on a public address with a key", []string{"--collector.addr", "0.0.0.0:8080", key}, "", true},
		{"bad mode", []string{"--collector.auth.enabled", "yes"}, "collector.auth.enabled", false},
		{"short hash", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=web:abc:ingest:10:10"}, "collector.auth.keys[0].sha256", true},
		{"unknown scope", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=web:" + testHash + ":write:10:10"}, `collector.auth.keys[0].scopes: has "write"`, true},
		{"zero rate", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=web:" + testHash + ":ingest:0:10"}, "collector.auth.keys[0].rate", true},
		{"zero burst", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=web:" + testHash + ":ingest:1:0"}, "collector.auth.keys[0].burst", true},
		{"malformed compact key", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=web:" + testHash}, "id:sha256:scope+scope:rate:burst", true},
		{"duplicate id", []string{"--collector.addr", "0.0.0.0:8080", key + ",web:" + strings.Repeat("0", 64) + ":read:1:1"}, `collector.auth.keys[1].id: "web" is used`, true},
		{"duplicate secret", []string{"--collector.addr", "0.0.0.0:8080", key + ",other:" + testHash + ":read:1:1"}, "collector.auth.keys[1].sha256: is the hash of another", true},
		{"like scope without token key", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=app:" + testHash + ":like:10:10"}, "collector.auth.user_token_key: is empty", true},
		{"like scope with token key", []string{"--collector.addr", "0.0.0.0:8080", "--collector.auth.keys=app:" + testHash + ":like:10:10", tokenKey}, "", true},
		{"short token key", []string{"--collector.auth.user_token_key", "short"}, "collector.auth.user_token_key: is 5 bytes", false},
		{"admin address is the API address", []string{"--collector.addr", "0.0.0.0:8080", "--collector.admin_addr", "0.0.0.0:8080", key}, "collector.admin_addr", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Settings
			_, err := config.Load("test", tt.args, &c)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got error %v; want the start allowed", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got error %v; want one containing %q", err, tt.want)
			case tt.want == "" && c.AuthOn() != tt.wantOn:
				t.Errorf("got AuthOn %v; want %v", c.AuthOn(), tt.wantOn)
			}
		})
	}
}

// TestLoadErrorsNameTheKey: a bad collector setting stops the start naming its key.
func TestLoadErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("collector:\n  adr: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad addr", []string{"--collector.addr", "nohostport"}, "collector.addr"},
		{"unknown file key", []string{"--config", typo}, `"collector.adr"`},
		{"no read timeout", []string{"--collector.read_timeout", "0s"}, "collector.read_timeout"},
		{"write bound under read plus kafka", []string{"--collector.read_timeout", "30s", "--collector.write_timeout", "35s"}, "collector.write_timeout"},
		{"header bound over read bound", []string{"--collector.read_header_timeout", "40s"}, "collector.read_header_timeout"},
		{"no idle timeout", []string{"--collector.idle_timeout", "-1s"}, "collector.idle_timeout"},
		{"no ingest bodies", []string{"--collector.max_concurrent_bodies", "0"}, "collector.max_concurrent_bodies"},
		{"no fallback bound", []string{"--collector.fallback_timeout", "0s"}, "collector.fallback_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Settings
			_, err := config.Load("test", tt.args, &s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v; want one naming %s", err, tt.want)
			}
		})
	}
}

// TestClickIDs: the collector's part of the clicks section decodes its keys from every layer and
// a bad key stops the start naming it.
func TestClickIDs(t *testing.T) {
	a, b := strings.Repeat("A", 43), strings.Repeat("B", 43) // 32 bytes each in base64url
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // the error's key, or for a good load the keys read
	}{
		{"keys from env", map[string]string{"TALLY_CLICKS_KEYS": "old:" + a + ",new:" + b, "TALLY_CLICKS_SIGNING_KEY": "new"}, nil, "2 keys, old 32 bytes, signing with new"},
		{"keys from flags", nil, []string{"--clicks.keys", "k1:" + a, "--clicks.signing_key", "k1"}, "1 keys, k1 32 bytes, signing with k1"},
		{"key not base64", nil, []string{"--clicks.keys", "k1:!!!", "--clicks.signing_key", "k1"}, "clicks.keys"},
		{"key too short", nil, []string{"--clicks.keys", "k1:c2hvcnQ", "--clicks.signing_key", "k1"}, "clicks.keys"},
		{"key without id", map[string]string{"TALLY_CLICKS_KEYS": "c2hvcnQ"}, nil, "clicks.keys"},
		{"key listed twice", nil, []string{"--clicks.keys", "k1:" + a + ",k1:" + b, "--clicks.signing_key", "k1"}, "clicks.keys"},
		{"signing key not listed", nil, []string{"--clicks.keys", "k1:" + a, "--clicks.signing_key", "k2"}, "clicks.signing_key"},
		{"keys without a signing key", nil, []string{"--clicks.keys", "k1:" + a}, "clicks.signing_key"},
		{"render age zero", nil, []string{"--clicks.max_render_age", "0s"}, "clicks.max_render_age"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c Settings
			_, err := config.Load("test", tt.args, c.Sections()...)
			if strings.HasPrefix(tt.want, "clicks.") {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("got error %v; want one naming %s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			keys, err := c.ClickIDs.ClickIDKeys()
			if err != nil {
				t.Fatalf("ClickIDKeys: %v", err)
			}
			if got := fmt.Sprintf("%d keys, %s %d bytes, signing with %s", len(keys), keys[0].ID, len(keys[0].Secret), c.ClickIDs.SigningKey); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}
