package tlsconf

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/testsupport/testcerts"
)

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	certs, err := testcerts.Make(dir)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		f       Files
		wantNil bool
		wantErr string
		check   func(*tls.Config) string
	}{
		{"off", Files{}, true, "", nil},
		{"off with a CA file", Files{CAFile: certs.CA}, false, "not enabled", nil},
		{"system roots", Files{Enabled: true}, false, "", func(c *tls.Config) string {
			if c.RootCAs != nil || c.MinVersion != tls.VersionTLS12 || c.InsecureSkipVerify {
				return "want system roots, TLS 1.2 minimum, verification on"
			}
			return ""
		}},
		{"own CA and server name", Files{Enabled: true, CAFile: certs.CA, ServerName: "kafka.internal"}, false, "", func(c *tls.Config) string {
			if c.RootCAs == nil || c.ServerName != "kafka.internal" {
				return "want the CA pool and the server name"
			}
			return ""
		}},
		{"client certificate", Files{Enabled: true, CertFile: certs.Cert, KeyFile: certs.Key}, false, "", func(c *tls.Config) string {
			if len(c.Certificates) != 1 {
				return "want one client certificate"
			}
			return ""
		}},
		{"missing CA", Files{Enabled: true, CAFile: filepath.Join(dir, "none.pem")}, false, "read CA file", nil},
		{"CA not PEM", Files{Enabled: true, CAFile: certs.Key}, false, "holds no PEM certificate", nil},
		{"key without certificate", Files{Enabled: true, KeyFile: certs.Key}, false, "both cert_file and key_file", nil},
		{"certificate with the wrong key file", Files{Enabled: true, CertFile: certs.Cert, KeyFile: certs.CA}, false, "load client certificate", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.f.Config()
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v; want an error containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("got %v; want no error", err)
			case tt.wantNil != (c == nil):
				t.Fatalf("got config %v; want nil %v", c, tt.wantNil)
			case tt.check != nil:
				if why := tt.check(c); why != "" {
					t.Errorf("got %+v; %s", c, why)
				}
			}
		})
	}
}
