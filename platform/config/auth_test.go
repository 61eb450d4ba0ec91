package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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
		want []APIKey
	}{
		{"yaml list", nil, []string{"--config", file}, []APIKey{web}},
		{"flag compact", nil, []string{"--config", file, "--collector.auth.keys", compact}, []APIKey{app}},
		{"env compact, two keys", map[string]string{"TALLY_COLLECTOR_AUTH_KEYS": compact + ",web:" + testHash + ":ingest+read:50:100"},
			[]string{"--config", file}, []APIKey{app, web}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Load("test", tt.args)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(c.Collector.Auth.Keys, tt.want) {
				t.Errorf("got keys %+v; want %+v", c.Collector.Auth.Keys, tt.want)
			}
			if !c.Collector.AuthOn() {
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
			c, err := Load("test", tt.args)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got error %v; want the start allowed", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got error %v; want one containing %q", err, tt.want)
			case tt.want == "" && c.Collector.AuthOn() != tt.wantOn:
				t.Errorf("got AuthOn %v; want %v", c.Collector.AuthOn(), tt.wantOn)
			}
		})
	}
}

func FuzzParseAPIKey(f *testing.F) {
	for _, s := range []string{"web:" + testHash + ":ingest+read:100:200", "a:b:c:d:e", "::::", "x:y:z:1e308:9999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseAPIKey(s)
		if err != nil {
			return
		}
		if strings.Count(s, ":") != 4 {
			t.Errorf("ParseAPIKey(%q) = %+v; want an error for %d separators", s, k, strings.Count(s, ":"))
		}
	})
}

func TestBackendSecurityChecks(t *testing.T) {
	certs := t.TempDir()
	ca := filepath.Join(certs, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := []string{"--kafka.brokers", "k:9093", "--redis.addr", "r:6380", "--clickhouse.addr", "c:8443"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"scram 512 with credentials", append(servers, "--kafka.sasl.mechanism", "SCRAM-SHA-512", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p"), ""},
		{"unknown mechanism", append(servers, "--kafka.sasl.mechanism", "PLAIN", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p"), `kafka.sasl.mechanism: got "PLAIN"`},
		{"mechanism without password", append(servers, "--kafka.sasl.mechanism", "SCRAM-SHA-256", "--kafka.sasl.username", "u"), "kafka.sasl.username: SCRAM-SHA-256 needs"},
		{"credentials without mechanism", append(servers, "--kafka.sasl.password", "p"), "kafka.sasl.mechanism: is empty"},
		{"sasl for the embedded broker", []string{"--kafka.sasl.mechanism", "SCRAM-SHA-256", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p"}, "kafka.sasl.mechanism: is set but kafka.brokers is empty"},
		{"kafka tls with the system roots", append(servers, "--kafka.tls.enabled"), ""},
		{"kafka tls, unreadable CA", append(servers, "--kafka.tls.enabled", "--kafka.tls.ca_file", filepath.Join(certs, "none.pem")), "kafka.tls: read CA file"},
		{"redis tls, CA not PEM", append(servers, "--redis.tls.enabled", "--redis.tls.ca_file", ca), "redis.tls: CA file"},
		{"clickhouse tls file without tls", append(servers, "--clickhouse.tls.ca_file", ca), "clickhouse.tls: TLS files or a server name are set but TLS is not enabled"},
		{"clickhouse tls cert without key", append(servers, "--clickhouse.tls.enabled", "--clickhouse.tls.cert_file", ca), "clickhouse.tls: a client certificate needs both"},
		{"redis user without password", append(servers, "--redis.username", "tally"), "redis.password: is empty"},
		{"redis password for the embedded server", []string{"--redis.password", "p"}, "redis.password: is set but redis.addr is empty"},
		{"clickhouse tls for the embedded engine", []string{"--clickhouse.tls.enabled"}, "clickhouse.tls.enabled: is set but clickhouse.addr is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load("test", tt.args)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got error %v; want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got error %v; want one containing %q", err, tt.want)
			case tt.want == "":
				if _, err := c.Kafka.Security().Options(); err != nil {
					t.Errorf("got %v building the Kafka options of a valid config; want none", err)
				}
			}
		})
	}
}
