package schemas

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Signed click ids. An ad server mints one when it renders an ad and puts it in the click URL:
//
//	c1.<key id>.<render time>.<nonce>.<signature>.<ad id>
//
// render time is Unix milliseconds in base 36, nonce 12 random bytes and signature the first 16
// bytes of HMAC-SHA256(secret of key id, everything before the signature's dot, then the ad id),
// both unpadded base64url. The ad id comes last so it may hold dots; every other field is free
// of them. All characters pass CheckID, and the whole id is at most MaxIDLen bytes, which bounds
// the ad ids a signed id can carry (about 60 bytes with a short key id).
//
// The key id names the secret, so keys rotate without invalidating ids in flight: the collector
// verifies with every configured key and signs with one (docs/SECURITY.md).
const clickIDPrefix = "c1."

// MaxClickIDKeyIDLen bounds a key id: 1 to 16 letters, digits, _ or -.
const MaxClickIDKeyIDLen = 16

// MinClickIDSecretLen is the shortest secret accepted: 32 bytes, the HMAC-SHA256 block's half.
const MinClickIDSecretLen = 32

const (
	clickIDNonceLen = 12
	clickIDSigLen   = 16
)

// ClickIDKey is one signing secret and the id it is known by.
type ClickIDKey struct {
	ID     string
	Secret []byte
}

// ClickIDKeys signs click ids with one key and verifies them with any of several, which is how
// a key is rotated. It is immutable and safe for concurrent use.
type ClickIDKeys struct {
	signing string
	secrets map[string][]byte
}

// ClickIDInfo is what a click id says about itself.
type ClickIDInfo struct {
	KeyID      string
	AdID       string
	RenderedAt time.Time
}

// NewClickIDKeys returns keys that sign with the key named signing and verify with all of keys.
func NewClickIDKeys(signing string, keys []ClickIDKey) (*ClickIDKeys, error) {
	k := &ClickIDKeys{signing: signing, secrets: make(map[string][]byte, len(keys))}
	for _, key := range keys {
		if err := checkKeyID(key.ID); err != nil {
			return nil, err
		}
		if len(key.Secret) < MinClickIDSecretLen {
			return nil, fmt.Errorf("click id key %q: secret is %d bytes; at least %d required", key.ID, len(key.Secret), MinClickIDSecretLen)
		}
		if _, dup := k.secrets[key.ID]; dup {
			return nil, fmt.Errorf("click id key %q is given twice", key.ID)
		}
		k.secrets[key.ID] = append([]byte(nil), key.Secret...)
	}
	if _, ok := k.secrets[signing]; !ok {
		return nil, fmt.Errorf("signing click id key %q is not among the configured keys", signing)
	}
	return k, nil
}

func checkKeyID(id string) error {
	if id == "" || len(id) > MaxClickIDKeyIDLen {
		return fmt.Errorf("click id key id %q: want 1 to %d letters, digits, _ or -", id, MaxClickIDKeyIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("click id key id %q: want 1 to %d letters, digits, _ or -", id, MaxClickIDKeyIDLen)
		}
	}
	return nil
}

// SigningKeyID names the key new ids are signed with.
func (k *ClickIDKeys) SigningKeyID() string { return k.signing }

// Mint returns a new signed click id for adID rendered at renderedAt, with a random nonce so
// every render gets its own id.
func (k *ClickIDKeys) Mint(adID string, renderedAt time.Time) (string, error) {
	if err := CheckID("ad_id", adID, true); err != nil {
		return "", err
	}
	var nonce [clickIDNonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("mint click id: read random nonce: %w", err)
	}
	head := clickIDPrefix + k.signing + "." + strconv.FormatInt(renderedAt.UnixMilli(), 36) + "." + base64.RawURLEncoding.EncodeToString(nonce[:]) + "."
	id := head + base64.RawURLEncoding.EncodeToString(sign(k.secrets[k.signing], head, adID)) + "." + adID
	if len(id) > MaxIDLen {
		return "", &FieldError{"ad_id", fmt.Sprintf("is %d bytes; a signed click id carries at most %d", len(adID), len(adID)-(len(id)-MaxIDLen))}
	}
	return id, nil
}

func sign(secret []byte, head, adID string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(head))
	m.Write([]byte(adID))
	return m.Sum(nil)[:clickIDSigLen]
}

// errNotSigned is ParseClickID's answer for an id not in the signed format.
var errNotSigned = errors.New("is not a signed click id (c1.<key>.<time>.<nonce>.<signature>.<ad id>)")

// parseClickID splits a signed id into its fields without checking the signature.
func parseClickID(id string) (info ClickIDInfo, head, sig string, err error) {
	if !strings.HasPrefix(id, clickIDPrefix) {
		return info, "", "", errNotSigned
	}
	parts := strings.SplitN(id[len(clickIDPrefix):], ".", 5)
	if len(parts) != 5 || parts[4] == "" || checkKeyID(parts[0]) != nil ||
		len(parts[2]) != base64.RawURLEncoding.EncodedLen(clickIDNonceLen) || len(parts[3]) != base64.RawURLEncoding.EncodedLen(clickIDSigLen) {
		return info, "", "", errNotSigned
	}
	ms, perr := strconv.ParseInt(parts[1], 36, 64)
	if perr != nil || ms < MinEventTS || ms >= MaxEventTS || strconv.FormatInt(ms, 36) != parts[1] {
		return info, "", "", errNotSigned
	}
	info = ClickIDInfo{KeyID: parts[0], AdID: parts[4], RenderedAt: time.UnixMilli(ms).UTC()}
	head = id[:len(id)-len(parts[4])-len(parts[3])-1]
	return info, head, parts[3], nil
}

// ParseClickID reads what a signed click id says (key, ad and render time) without checking its
// signature; ok is false for an id not in the signed format. Use it where the id has been
// verified already or only routes work (never to trust the ad id).
func ParseClickID(id string) (info ClickIDInfo, ok bool) {
	info, _, _, err := parseClickID(id)
	return info, err == nil
}

// ClickIDCheck says which render times Verify accepts.
type ClickIDCheck struct {
	Now time.Time
	// MaxAge bounds how long ago the id may have been rendered; 0 accepts any age (a fraud
	// verdict may come days after its click).
	MaxAge time.Duration
	// Future bounds how far ahead of Now a render time may lie (the ad server's clock skew).
	Future time.Duration
}

// Verify checks that id is signed by one of the keys and its render time passes check, and
// returns what it says. Errors are FieldErrors for click_id.
func (k *ClickIDKeys) Verify(id string, check ClickIDCheck) (ClickIDInfo, error) {
	info, head, sig, err := parseClickID(id)
	if err != nil {
		return ClickIDInfo{}, &FieldError{"click_id", err.Error() + "; ids must be minted by POST /v1/ads/{ad_id}/click-ids while a signing key is configured"}
	}
	secret, ok := k.secrets[info.KeyID]
	if !ok {
		return ClickIDInfo{}, &FieldError{"click_id", fmt.Sprintf("is signed with key %q, which is not configured (retired or unknown)", info.KeyID)}
	}
	// Compared as text, not decoded: base64 ignores a last character's unused bits, and two
	// spellings of one signature would make one click two ids.
	want := base64.RawURLEncoding.EncodeToString(sign(secret, head, info.AdID))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return ClickIDInfo{}, &FieldError{"click_id", "has an invalid signature (forged or altered)"}
	}
	if d := info.RenderedAt.Sub(check.Now); d > check.Future {
		return ClickIDInfo{}, &FieldError{"click_id", fmt.Sprintf("was rendered %s in the future; at most %s allowed", d.Round(time.Second), check.Future)}
	}
	if d := check.Now.Sub(info.RenderedAt); check.MaxAge > 0 && d > check.MaxAge {
		return ClickIDInfo{}, &FieldError{"click_id", fmt.Sprintf("was rendered %s ago; clicks on ads rendered more than %s ago are rejected", d.Round(time.Second), check.MaxAge)}
	}
	return info, nil
}

// VerifyClick checks c's click id with Verify and that it was minted for c's ad.
func (k *ClickIDKeys) VerifyClick(c Click, check ClickIDCheck) error {
	info, err := k.Verify(c.ClickID, check)
	if err != nil {
		return err
	}
	if info.AdID != c.AdID {
		return &FieldError{"click_id", fmt.Sprintf("was minted for ad %q, not for ad_id %q", info.AdID, c.AdID)}
	}
	return nil
}
