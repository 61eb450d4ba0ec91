package client

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// A counter write retried after a 503 sends the same token: minted before the first attempt
// when the caller gave none, the caller's own otherwise.
func TestCounterWritesKeepTheirTokenAcrossRetries(t *testing.T) {
	busy := answer{status: 503, retryAfter: "0", body: `{"error":"add failed; retry"}`}
	tests := []struct {
		name  string
		call  func(*Client) (CounterResult, error)
		token string // the caller's; empty: minted
	}{
		{"add with a minted token", func(c *Client) (CounterResult, error) {
			return c.AddCount(context.Background(), "shares", "post-1", CounterAdd{Delta: 2})
		}, ""},
		{"add and get with the caller's token", func(c *Client) (CounterResult, error) {
			return c.AddAndGetCount(context.Background(), "shares", "post-1", CounterAdd{Delta: -1, Token: "t-7", EventTime: time.Unix(1, 0)})
		}, "t-7"},
		{"clear with a minted token", func(c *Client) (CounterResult, error) {
			return c.ClearCount(context.Background(), "shares", "post-1", "")
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := newScripted(t, Options{MaxAttempts: 5}, busy, busy, answer{200, "", `{"count":4,"duplicate":true}`})
			got, err := tt.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Duplicate {
				t.Errorf("got %+v; want the answer decoded (duplicate)", got)
			}
			if len(s.bodies) != 3 {
				t.Fatalf("got %d attempts; want 3", len(s.bodies))
			}
			var first struct {
				Token string `json:"idempotency_token"`
			}
			if err := json.Unmarshal([]byte(s.bodies[0]), &first); err != nil {
				t.Fatal(err)
			}
			if first.Token == "" || tt.token != "" && first.Token != tt.token {
				t.Errorf("got token %q; want %q (or a minted one)", first.Token, tt.token)
			}
			for i, b := range s.bodies {
				if b != s.bodies[0] {
					t.Errorf("attempt %d sent %q; want the first attempt's %q", i+1, b, s.bodies[0])
				}
			}
		})
	}
}

// A batch of adds retried after a 503 sends the same body: every add's token minted once,
// before the first attempt, unless the caller gave one.
func TestCounterBatchKeepsItsTokensAcrossRetries(t *testing.T) {
	busy := answer{status: 503, retryAfter: "0", body: `{"error":"add failed; retry"}`}
	c, s := newScripted(t, Options{MaxAttempts: 5}, busy, busy, answer{202, "", `{"added":2,"duplicates":0}`})
	got, err := c.AddCounts(context.Background(), "shares", []CounterBatchAdd{{Name: "a", CounterAdd: CounterAdd{Delta: 1}}, {Name: "b", CounterAdd: CounterAdd{Delta: 2, Token: "t-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Added != 2 || len(s.bodies) != 3 {
		t.Fatalf("got %+v after %d attempts; want 2 added after 3", got, len(s.bodies))
	}
	var first struct {
		Adds []struct {
			Token string `json:"idempotency_token"`
		} `json:"adds"`
	}
	if err := json.Unmarshal([]byte(s.bodies[0]), &first); err != nil {
		t.Fatal(err)
	}
	if len(first.Adds) != 2 || first.Adds[0].Token == "" || first.Adds[1].Token != "t-1" {
		t.Errorf("got %s; want a minted token, then t-1", s.bodies[0])
	}
	for i, b := range s.bodies {
		if b != s.bodies[0] {
			t.Errorf("attempt %d sent %q; want the first attempt's %q", i+1, b, s.bodies[0])
		}
	}
}

// PutNamespace succeeds on 201 (created) and 200 (changed).
func TestPutNamespaceAcceptsCreatedAndChanged(t *testing.T) {
	ns := `{"name":"shares","mode":"best_effort","retention":"90d","idempotency_window":"1d","writers":[],"readers":[],"changed_at":"2026-12-04T10:00:00Z"}`
	c, _ := newScripted(t, Options{}, answer{201, "", ns}, answer{200, "", ns})
	for _, want := range []string{"created", "changed"} {
		got, err := c.PutNamespace(context.Background(), "shares", NamespaceSpec{Mode: ModeBestEffort})
		if err != nil || got.Name != "shares" || got.Mode != ModeBestEffort {
			t.Errorf("%s: got %+v, %v; want namespace shares in best_effort", want, got, err)
		}
	}
}
