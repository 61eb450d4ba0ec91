package auth

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func FuzzVerifyUserToken(f *testing.F) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	good, err := MintUserToken([]byte(tokenKey), "u42", now, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"Bearer " + good, good, "Bearer ", "Basic x", "Bearer a.b.c", "bearer " + good + " extra",
		"Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1NDIifQ."} {
		f.Add(s)
	}
	g := &Guard{tokenKey: []byte(tokenKey)}
	f.Fuzz(func(t *testing.T, header string) {
		user, err := g.verifyUserToken(header, now)
		if err != nil {
			return
		}
		// Accepted: it must be an HS256 token signed with the key, for a user.
		tok := header[strings.LastIndexByte(header, ' ')+1:]
		head, _, _ := strings.Cut(tok, ".")
		alg, derr := base64.RawURLEncoding.DecodeString(head)
		if user == "" || derr != nil || !bytes.Contains(alg, []byte(`"HS256"`)) {
			t.Errorf("accepted %q as user %q; want only HS256 tokens naming a user", header, user)
		}
	})
}

func TestCommand(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	run := func(args []string, stdin string, env map[string]string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Command(args, CommandEnv{Getenv: func(k string) string { return env[k] }, Stdin: strings.NewReader(stdin),
			Stdout: &out, Stderr: &errb, Now: func() time.Time { return now }})
		return code, out.String(), errb.String()
	}
	t.Run("new key hashes to what hash prints", func(t *testing.T) {
		code, out, stderr := run([]string{"keys", "new", "--id", "web", "--scopes", "ingest,read", "--rate", "5", "--burst", "10"}, "", nil)
		if code != 0 {
			t.Fatalf("got exit %d %s; want 0", code, stderr)
		}
		secret := between(out, "shown once): ", "\n")
		if !strings.HasPrefix(secret, SecretPrefix) || len(secret) != len(SecretPrefix)+43 {
			t.Fatalf("got secret %q; want %s and 43 base64url characters", secret, SecretPrefix)
		}
		if want := "web:" + HashSecret(secret) + ":ingest+read:5:10"; !strings.Contains(out, want) {
			t.Errorf("got %s; want the compact entry %s", out, want)
		}
		code, out, _ = run([]string{"keys", "hash"}, secret+"\n", nil)
		if code != 0 || strings.TrimSpace(out) != HashSecret(secret) {
			t.Errorf("got exit %d %q; want 0 %s", code, out, HashSecret(secret))
		}
	})
	t.Run("token verifies", func(t *testing.T) {
		code, out, stderr := run([]string{"token", "--user", "u42", "--ttl", "10m"}, "", map[string]string{"TALLY_COLLECTOR_AUTH_USER_TOKEN_KEY": tokenKey})
		if code != 0 {
			t.Fatalf("got exit %d %s; want 0", code, stderr)
		}
		user, err := VerifyUserToken([]byte(tokenKey), strings.TrimSpace(out), now.Add(9*time.Minute))
		if err != nil || user != "u42" {
			t.Errorf("got %q %v; want u42", user, err)
		}
		if _, err := VerifyUserToken([]byte(tokenKey), strings.TrimSpace(out), now.Add(11*time.Minute)); err == nil {
			t.Error("got a 10-minute token valid after 11 minutes; want expired")
		}
	})
	for _, tt := range []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"new without scopes", []string{"keys", "new", "--id", "web"}, "", "want --id and --scopes"},
		{"new with a bad scope", []string{"keys", "new", "--id", "web", "--scopes", "write"}, "", "unknown scope"},
		{"hash of a short secret", []string{"keys", "hash"}, "hunter2\n", "at least 32"},
		{"token without the key", []string{"token", "--user", "u42"}, "", "TALLY_COLLECTOR_AUTH_USER_TOKEN_KEY is 0 bytes"},
		{"unknown", []string{"keys", "delete"}, "", "unknown command"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(tt.args, tt.stdin, nil)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("got exit %d %q; want 2 containing %q", code, stderr, tt.want)
			}
		})
	}
}

func between(s, from, to string) string {
	_, rest, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(rest, to)
	return v
}
