// Package testcerts makes throwaway certificates for tests of TLS links (Kafka, Redis,
// ClickHouse): a CA and one certificate it signed for 127.0.0.1 and localhost. It has no
// dependencies beyond the standard library, so any package's tests can use it.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs are PEM files of a throwaway CA and one certificate it signed for 127.0.0.1 and
// localhost, usable by a test server and as a client certificate.
type Certs struct {
	CA, Cert, Key string
}

// Make writes a new CA and leaf certificate under dir, valid for an hour.
func Make(dir string) (Certs, error) {
	c := Certs{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return c, fmt.Errorf("make test CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tally test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return c, fmt.Errorf("make test CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return c, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return c, fmt.Errorf("make test key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return c, fmt.Errorf("make test certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return c, err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.CA, "CERTIFICATE", caDER}, {c.Cert, "CERTIFICATE", der}, {c.Key, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return c, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return c, nil
}
