package schemas

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func testKeys(t testing.TB) *ClickIDKeys {
	t.Helper()
	k, err := NewClickIDKeys("k2", []ClickIDKey{{"k1", bytes.Repeat([]byte{1}, 32)}, {"k2", bytes.Repeat([]byte{2}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestClickIDSignAndVerify(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	keys := testKeys(t)
	oldOnly, err := NewClickIDKeys("k1", []ClickIDKey{{"k1", bytes.Repeat([]byte{1}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	otherSecret, err := NewClickIDKeys("k2", []ClickIDKey{{"k2", bytes.Repeat([]byte{9}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(k *ClickIDKeys, ad string, at time.Time) string {
		id, err := k.Mint(ad, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckID("click_id", id, true); err != nil {
			t.Fatalf("minted id %q fails CheckID: %v", id, err)
		}
		return id
	}
	fresh := mint(keys, "ad.with:dots", now.Add(-time.Minute))
	forgedSig := fresh[:strings.LastIndex(fresh[:len(fresh)-len(".ad.with:dots")], ".")+1] + strings.Repeat("A", 22) + ".ad.with:dots"
	// The signature's last character carries 2 bits and 4 unused ones: the next character in the
	// alphabet decodes to the same bytes, and must still be refused.
	sigEnd := len(fresh) - len(".ad.with:dots")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	respelt := fresh[:sigEnd-1] + string(alphabet[strings.IndexByte(alphabet, fresh[sigEnd-1])+1]) + fresh[sigEnd:]
	check := ClickIDCheck{Now: now, MaxAge: time.Hour, Future: time.Minute}
	tests := []struct {
		name    string
		click   Click
		wantErr string
	}{
		{"fresh", Click{ClickID: fresh, AdID: "ad.with:dots"}, ""},
		{"rotated out key still verifies", Click{ClickID: mint(oldOnly, "a1", now), AdID: "a1"}, ""},
		{"other ad", Click{ClickID: fresh, AdID: "ad.with"}, "was minted for ad"},
		{"ad swapped in id", Click{ClickID: strings.TrimSuffix(fresh, "ad.with:dots") + "ad-2", AdID: "ad-2"}, "invalid signature"},
		{"signature respelt", Click{ClickID: respelt, AdID: "ad.with:dots"}, "invalid signature"},
		{"forged signature", Click{ClickID: forgedSig, AdID: "ad.with:dots"}, "invalid signature"},
		{"other secret", Click{ClickID: mint(otherSecret, "a1", now), AdID: "a1"}, "invalid signature"},
		{"too old", Click{ClickID: mint(keys, "a1", now.Add(-2*time.Hour)), AdID: "a1"}, "rendered 2h0m0s ago"},
		{"future", Click{ClickID: mint(keys, "a1", now.Add(time.Hour)), AdID: "a1"}, "in the future"},
		{"unsigned", Click{ClickID: "plain-id", AdID: "a1"}, "is not a signed click id"},
		{"unknown key", Click{ClickID: strings.Replace(fresh, "c1.k2.", "c1.k3.", 1), AdID: "ad.with:dots"}, `key "k3"`},
		{"truncated", Click{ClickID: fresh[:20], AdID: "ad.with:dots"}, "is not a signed click id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := keys.VerifyClick(tt.click, check)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v; want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "click_id" || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v; want a click_id error containing %q", err, tt.wantErr)
			}
		})
	}
	info, ok := ParseClickID(fresh)
	if !ok || info.AdID != "ad.with:dots" || info.KeyID != "k2" || !info.RenderedAt.Equal(now.Add(-time.Minute)) {
		t.Errorf("got %+v, %v; want ad.with:dots, k2, %s", info, ok, now.Add(-time.Minute))
	}
	if a, b := mint(keys, "a1", now), mint(keys, "a1", now); a == b {
		t.Errorf("two mints gave the same id %q; want distinct nonces", a)
	}
	if _, err := keys.Mint(strings.Repeat("a", 100), now); err == nil {
		t.Errorf("minted an id for a 100-byte ad; want an error (ids are at most %d bytes)", MaxIDLen)
	}
}

func TestNewClickIDKeys(t *testing.T) {
	secret := bytes.Repeat([]byte{1}, 32)
	tests := []struct {
		name    string
		signing string
		keys    []ClickIDKey
		wantErr string
	}{
		{"short secret", "k1", []ClickIDKey{{"k1", secret[:31]}}, "at least 32"},
		{"signing missing", "k2", []ClickIDKey{{"k1", secret}}, "not among"},
		{"dup", "k1", []ClickIDKey{{"k1", secret}, {"k1", secret}}, "twice"},
		{"bad id", "k.1", []ClickIDKey{{"k.1", secret}}, "key id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewClickIDKeys(tt.signing, tt.keys)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v; want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func FuzzParseClickID(f *testing.F) {
	keys := testKeys(f)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	id, err := keys.Mint("ad-1", now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(id)
	f.Add("c1.k1.x.y.z.a")
	f.Add("plain")
	f.Fuzz(func(t *testing.T, s string) {
		info, ok := ParseClickID(s)
		vinfo, err := keys.Verify(s, ClickIDCheck{Now: now})
		if err == nil && (!ok || vinfo != info) {
			t.Fatalf("Verify accepted %q (%+v) but ParseClickID gave %+v, %v", s, vinfo, info, ok)
		}
	})
}
