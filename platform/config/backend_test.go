package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
		{"unknown mechanism", append(servers, "--kafka.sasl.mechanism", "GSSAPI", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p"), `kafka.sasl: mechanism "GSSAPI"; want SCRAM-SHA-256, SCRAM-SHA-512, PLAIN or OAUTHBEARER`},
		{"plain over tls", append(servers, "--kafka.sasl.mechanism", "PLAIN", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p", "--kafka.tls.enabled"), ""},
		{"plain without tls", append(servers, "--kafka.sasl.mechanism", "PLAIN", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p"), "kafka.sasl: PLAIN sends its secret as it is, so it needs TLS"},
		{"oauthbearer with a token file", append(servers, "--kafka.sasl.mechanism", "OAUTHBEARER", "--kafka.sasl.token_file", ca, "--kafka.tls.enabled"), ""},
		{"oauthbearer without a token file", append(servers, "--kafka.sasl.mechanism", "OAUTHBEARER", "--kafka.tls.enabled"), "kafka.sasl: OAUTHBEARER needs a token file"},
		{"oauthbearer with a password", append(servers, "--kafka.sasl.mechanism", "OAUTHBEARER", "--kafka.sasl.token_file", ca, "--kafka.sasl.password", "p", "--kafka.tls.enabled"), "no username or password"},
		{"mechanism without password", append(servers, "--kafka.sasl.mechanism", "SCRAM-SHA-256", "--kafka.sasl.username", "u"), "kafka.sasl: SCRAM-SHA-256 needs a username and a password"},
		{"credentials without mechanism", append(servers, "--kafka.sasl.password", "p"), "kafka.sasl: credentials are set but no mechanism"},
		{"sasl for the embedded broker", []string{"--kafka.sasl.mechanism", "SCRAM-SHA-256", "--kafka.sasl.username", "u", "--kafka.sasl.password", "p"}, "kafka.sasl.mechanism: is set but kafka.brokers is empty"},
		{"kafka tls with the system roots", append(servers, "--kafka.tls.enabled"), ""},
		{"kafka tls, unreadable CA", append(servers, "--kafka.tls.enabled", "--kafka.tls.ca_file", filepath.Join(certs, "none.pem")), "kafka.tls: read CA file"},
		{"redis tls, CA not PEM", append(servers, "--redis.tls.enabled", "--redis.tls.ca_file", ca), "redis.tls: CA file"},
		{"clickhouse tls file without tls", append(servers, "--clickhouse.tls.ca_file", ca), "clickhouse.tls: TLS files or a server name are set but TLS is not enabled"},
		{"clickhouse tls cert without key", append(servers, "--clickhouse.tls.enabled", "--clickhouse.tls.cert_file", ca), "clickhouse.tls: a client certificate needs both"},
		{"redis user without password", append(servers, "--redis.username", "tally"), "redis.password: is empty"},
		{"redis password for the embedded server", []string{"--redis.password", "p"}, "redis.password: is set but redis.addr is empty"},
		{"redis sentinels", []string{"--kafka.brokers", "k:9093", "--clickhouse.addr", "c:8443", "--redis.addr", "s1:26379, s2:26379,s3:26379", "--redis.sentinel_master", "tally", "--redis.sentinel_password", "sp"}, ""},
		{"sentinel master for the embedded server", []string{"--redis.sentinel_master", "tally"}, "redis.sentinel_master: is set but redis.addr is empty"},
		{"a sentinel without a port", []string{"--redis.addr", "s1:26379,s2", "--redis.sentinel_master", "tally"}, `redis.addr: got "s2"; want host:port`},
		{"two servers without a sentinel master", append(servers, "--redis.addr", "a:6379,b:6379"), `redis.addr: got "a:6379,b:6379"; want host:port`},
		{"redis cluster nodes", []string{"--kafka.brokers", "k:9093", "--clickhouse.addr", "c:8443", "--redis.addr", "n1:6379, n2:6379", "--redis.cluster"}, ""},
		{"redis cluster for the embedded server", []string{"--redis.cluster"}, "redis.cluster: is set but redis.addr is empty"},
		{"redis cluster with a sentinel master", []string{"--redis.addr", "n1:6379", "--redis.cluster", "--redis.sentinel_master", "tally"}, "redis.cluster: and redis.sentinel_master are both set"},
		{"a cluster node without a port", []string{"--redis.addr", "n1:6379,n2", "--redis.cluster"}, `redis.addr: got "n2"; want host:port`},
		{"sentinel password without a master", append(servers, "--redis.sentinel_password", "sp"), "redis.sentinel_password: is set but redis.sentinel_master is empty"},
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
