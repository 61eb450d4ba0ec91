package redisclient

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/devstack/redisproc"
	"github.com/tallypipeline/tally/platform/tlsconf"
	"github.com/tallypipeline/tally/testsupport/testcerts"
)

// start runs a real redis-server with extra arguments and returns its address.
func start(t *testing.T, extra ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{}
	for _, a := range extra {
		args = append(args, strings.ReplaceAll(a, "$PORT", strconv.Itoa(port)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := redisproc.Start(ctx, redisproc.Config{Dir: t.TempDir(), Port: port, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Extra: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	return p.Addr()
}

// Clients with the right credentials and CA get through to a redis-server requiring a password
// (requirepass), an ACL user, or TLS; wrong ones are refused on the first call.
func TestAuthAndTLSAgainstRedis(t *testing.T) {
	certs, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	withPass := start(t, "--requirepass", "s3cret")
	withACL := start(t, "--user", "default", "off", "--user", "tally", "on", ">tally-pw", "~*", "&*", "+@all")
	withTLS := start(t, "--tls-port", "$PORT", "--port", "0", "--tls-cert-file", certs.Cert, "--tls-key-file", certs.Key,
		"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "no", "--requirepass", "s3cret")
	withMTLS := start(t, "--tls-port", "$PORT", "--port", "0", "--tls-cert-file", certs.Cert, "--tls-key-file", certs.Key,
		"--tls-ca-cert-file", certs.CA, "--tls-auth-clients", "yes")
	trusted := tlsconf.Files{Enabled: true, CAFile: certs.CA}
	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" means PING answers; "*" any error
	}{
		{"requirepass", Options{Addr: withPass, Password: "s3cret"}, ""},
		{"requirepass, wrong password", Options{Addr: withPass, Password: "nope"}, "WRONGPASS"},
		{"requirepass, none given", Options{Addr: withPass}, "NOAUTH"},
		{"acl user", Options{Addr: withACL, Username: "tally", Password: "tally-pw"}, ""},
		{"acl user, wrong password", Options{Addr: withACL, Username: "tally", Password: "nope"}, "WRONGPASS"},
		{"acl, default user is off", Options{Addr: withACL}, "NOAUTH"},
		{"tls and password", Options{Addr: withTLS, Password: "s3cret", TLS: trusted}, ""},
		{"tls, untrusted CA", Options{Addr: withTLS, Password: "s3cret", TLS: tlsconf.Files{Enabled: true, CAFile: other.CA}}, "certificate"},
		{"plain client to a tls server", Options{Addr: withTLS, Password: "s3cret"}, "*"},
		{"mutual tls with a client certificate", Options{Addr: withMTLS, TLS: tlsconf.Files{Enabled: true, CAFile: certs.CA, CertFile: certs.Cert, KeyFile: certs.Key}}, ""},
		{"mutual tls without one", Options{Addr: withMTLS, TLS: trusted}, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb, err := New(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = rdb.Ping(ctx).Err()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v; want PONG", err)
			case tt.wantErr == "*" && err == nil:
				t.Error("got PONG; want an error")
			case tt.wantErr != "" && tt.wantErr != "*" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
		want string
	}{
		{"user without password", Options{Addr: "127.0.0.1:1", Username: "tally"}, "needs a password"},
		{"tls files with tls off", Options{Addr: "127.0.0.1:1", TLS: tlsconf.Files{CAFile: "ca.pem"}}, "not enabled"},
		{"missing CA file", Options{Addr: "127.0.0.1:1", TLS: tlsconf.Files{Enabled: true, CAFile: "/nonexistent/ca.pem"}}, "read CA file"},
		{"cert without key", Options{Addr: "127.0.0.1:1", TLS: tlsconf.Files{Enabled: true, CertFile: "c.pem"}}, "both cert_file and key_file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}
