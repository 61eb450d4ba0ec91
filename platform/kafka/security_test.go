package kafka_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/tlsconf"
	"github.com/tallypipeline/tally/testsupport/testcerts"
)

func TestSecurityOptions(t *testing.T) {
	tests := []struct {
		name    string
		sec     kafka.Security
		wantN   int
		wantErr string
	}{
		{"plain", kafka.Security{}, 0, ""},
		{"scram 256", kafka.Security{SASLMechanism: "SCRAM-SHA-256", Username: "u", Password: "p"}, 1, ""},
		{"scram 512 and tls", kafka.Security{SASLMechanism: "SCRAM-SHA-512", Username: "u", Password: "p", TLS: tlsconf.Files{Enabled: true}}, 2, ""},
		{"plain over tls", kafka.Security{SASLMechanism: "PLAIN", Username: "u", Password: "p", TLS: tlsconf.Files{Enabled: true}}, 2, ""},
		{"plain without tls", kafka.Security{SASLMechanism: "PLAIN", Username: "u", Password: "p"}, 0, "PLAIN sends its secret as it is"},
		{"oauthbearer over tls", kafka.Security{SASLMechanism: "OAUTHBEARER", TokenFile: "token", TLS: tlsconf.Files{Enabled: true}}, 2, ""},
		{"oauthbearer hook", kafka.Security{SASLMechanism: "OAUTHBEARER", Token: func(context.Context) (string, error) { return "t", nil }, TLS: tlsconf.Files{Enabled: true}}, 2, ""},
		{"oauthbearer without a token", kafka.Security{SASLMechanism: "OAUTHBEARER", TLS: tlsconf.Files{Enabled: true}}, 0, "needs a token file"},
		{"oauthbearer without tls", kafka.Security{SASLMechanism: "OAUTHBEARER", TokenFile: "token"}, 0, "needs TLS"},
		{"lower-case mechanism", kafka.Security{SASLMechanism: "scram-sha-256", Username: "u", Password: "p"}, 0, "want SCRAM-SHA-256, SCRAM-SHA-512, PLAIN or OAUTHBEARER (upper case)"},
		{"no password", kafka.Security{SASLMechanism: "SCRAM-SHA-256", Username: "u"}, 0, "needs a username and a password"},
		{"password without mechanism", kafka.Security{Password: "p"}, 0, "no mechanism"},
		{"tls files without tls", kafka.Security{TLS: tlsconf.Files{CAFile: "ca.pem"}}, 0, "not enabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := tt.sec.Options()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(opts) != tt.wantN {
				t.Errorf("got %d options, %v; want %d, no error", len(opts), err, tt.wantN)
			}
		})
	}
}

// A broker requiring SCRAM over TLS (kfake speaks both) takes records from a client with the
// right Security and refuses wrong credentials, a missing SASL step and an untrusted CA.
func TestSecurityAgainstBroker(t *testing.T) {
	certs, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certs.Cert, certs.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(kafka.ScramSHA256, "tally256", "pw-256"), kfake.Superuser(kafka.ScramSHA512, "tally512", "pw-512"),
		kfake.Superuser(kafka.Plain, "hosted", "pw-plain"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}),
		kfake.SeedTopics(1, "secured"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	trusted := tlsconf.Files{Enabled: true, CAFile: certs.CA}
	tests := []struct {
		name string
		sec  kafka.Security
		ok   bool
	}{
		{"scram-sha-256 over tls", kafka.Security{SASLMechanism: kafka.ScramSHA256, Username: "tally256", Password: "pw-256", TLS: trusted}, true},
		{"scram-sha-512 over tls", kafka.Security{SASLMechanism: kafka.ScramSHA512, Username: "tally512", Password: "pw-512", TLS: trusted}, true},
		{"plain over tls", kafka.Security{SASLMechanism: kafka.Plain, Username: "hosted", Password: "pw-plain", TLS: trusted}, true},
		{"plain, wrong password", kafka.Security{SASLMechanism: kafka.Plain, Username: "hosted", Password: "nope", TLS: trusted}, false},
		{"wrong password", kafka.Security{SASLMechanism: kafka.ScramSHA256, Username: "tally256", Password: "nope", TLS: trusted}, false},
		{"wrong mechanism for the user", kafka.Security{SASLMechanism: kafka.ScramSHA512, Username: "tally256", Password: "pw-256", TLS: trusted}, false},
		{"no sasl", kafka.Security{TLS: trusted}, false},
		{"untrusted server certificate", kafka.Security{SASLMechanism: kafka.ScramSHA256, Username: "tally256", Password: "pw-256",
			TLS: tlsconf.Files{Enabled: true, CAFile: otherCA.CA}}, false},
		{"no tls", kafka.Security{SASLMechanism: kafka.ScramSHA256, Username: "tally256", Password: "pw-256"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sec, err := tt.sec.Options()
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(append(kafka.ClientOptions(c.ListenAddrs(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil),
				kafka.ProducerOptions(kafka.Producer{MaxBuffered: 10, DeliveryTimeout: 2 * time.Second})...), sec...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err = cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Value: []byte(tt.name)}).FirstErr()
			if tt.ok && err != nil {
				t.Errorf("got %v; want the record acknowledged", err)
			}
			if !tt.ok && err == nil {
				t.Error("got the record acknowledged; want it refused")
			}
		})
	}
}

// OAUTHBEARER sends the token of the file as it is at each authentication (RFC 7628's client
// first message), so a refreshed file needs no restart; an empty or missing file fails the
// authentication with its name. The embedded test broker speaks no OAUTHBEARER, so the
// mechanism is driven directly.
func TestOAuthBearerReadsTheTokenFileEachTime(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	sec := kafka.Security{SASLMechanism: kafka.OAuthBearer, TokenFile: file, TLS: tlsconf.Files{Enabled: true}}
	mech, err := sec.Mechanism()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, file, want, wantErr string }{
		{"first token", "tok-1\n", "n,,\x01auth=Bearer tok-1\x01\x01", ""},
		{"refreshed", "tok-2", "n,,\x01auth=Bearer tok-2\x01\x01", ""},
		{"empty", " \n", "", "is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(file, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, first, err := mech.Authenticate(context.Background(), "broker:9093")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(first) != tt.want {
				t.Errorf("got %q, %v; want %q", first, err, tt.want)
			}
		})
	}
}
