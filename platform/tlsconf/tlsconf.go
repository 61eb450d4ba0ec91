// Package tlsconf turns TLS settings given as files (a CA bundle, a client certificate and key,
// a server name) into the *tls.Config the Kafka, Redis and ClickHouse clients take. It only
// reads files; the returned config is the caller's, safe to share between connections.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files are the TLS settings of one backend connection.
type Files struct {
	Enabled    bool   `mapstructure:"enabled"`
	CAFile     string `mapstructure:"ca_file"`     // PEM CA bundle the server's certificate must chain to; empty: the system's roots
	CertFile   string `mapstructure:"cert_file"`   // PEM client certificate, for servers that require one (with KeyFile)
	KeyFile    string `mapstructure:"key_file"`    // PEM key of CertFile
	ServerName string `mapstructure:"server_name"` // name the server's certificate must carry; empty: the host dialled
}

// Config returns the client TLS configuration, or nil when TLS is off. Certificates are always
// verified: there is no setting to skip verification, because an unverified TLS link stops
// only passive listeners. The minimum version is TLS 1.2.
func (f Files) Config() (*tls.Config, error) {
	if !f.Enabled {
		if f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.ServerName != "" {
			return nil, errors.New("TLS files or a server name are set but TLS is not enabled")
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", f.CAFile)
		}
		c.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("a client certificate needs both cert_file and key_file")
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
