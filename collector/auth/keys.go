package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// SecretPrefix starts every secret NewSecret mints, so a leaked key is recognisable in logs and
// by secret scanners.
const SecretPrefix = "tally_"

// NewSecret returns a new API key secret: 32 random bytes, base64url, after SecretPrefix. With
// 256 random bits a plain SHA-256 of the secret is as good as a slow password hash: there is
// nothing to guess, so the configured hashes reveal nothing useful if they leak.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail: it crashes the program rather than return weak bytes
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// HashSecret is the hex SHA-256 of secret, as configured in collector.auth.keys.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}
