package chclient_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"tally/devstack/chembed"
	"tally/platform/chclient"
	"tally/platform/tlsconf"
	"tally/testsupport/testcerts"
)

// The real engine (chDB on the HTTP interface) behind an HTTPS front, as a TLS-terminating
// ClickHouse or proxy would be: a client with TLS and the right CA queries it; an untrusted
// server certificate or a plain-HTTP client is refused.
func TestTLSAgainstClickHouse(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := chembed.Start(chembed.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close(context.Background())
	certs, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certs.Cert, certs.Key)
	if err != nil {
		t.Fatal(err)
	}
	backend, _ := url.Parse("http://" + ch.Addr())
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(backend))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	front.StartTLS()
	defer front.Close()
	addr := strings.TrimPrefix(front.URL, "https://")
	tests := []struct {
		name string
		tls  tlsconf.Files
		ok   bool
	}{
		{"tls with the CA", tlsconf.Files{Enabled: true, CAFile: certs.CA}, true},
		{"tls with the CA and a server name", tlsconf.Files{Enabled: true, CAFile: certs.CA, ServerName: "localhost"}, true},
		{"tls, wrong server name", tlsconf.Files{Enabled: true, CAFile: certs.CA, ServerName: "clickhouse.example"}, false},
		{"tls, untrusted CA", tlsconf.Files{Enabled: true, CAFile: other.CA}, false},
		{"plain http to https", tlsconf.Files{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			conn, err := chclient.Open(ctx, chclient.Options{Addr: addr, Database: "tlstest", Username: "default", TLS: tt.tls})
			if !tt.ok {
				if err == nil {
					conn.Close()
					t.Fatal("got a connection; want it refused")
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v; want a connection", err)
			}
			defer conn.Close()
			var one uint8
			if err := conn.QueryRow(ctx, "SELECT toUInt8(1)").Scan(&one); err != nil || one != 1 {
				t.Errorf("got %d, %v; want 1", one, err)
			}
		})
	}
	if _, err := chclient.Open(context.Background(), chclient.Options{Addr: addr, TLS: tlsconf.Files{Enabled: true, CAFile: "/nonexistent"}}); err == nil || !strings.Contains(err.Error(), "read CA file") {
		t.Errorf("got %v; want an error reading the CA file", err)
	}
}
