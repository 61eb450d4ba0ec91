package client

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A view count is sent with its fields as given, the same bytes on every retry; as an event line
// it carries "type":"view_count".
func TestViewCountEncoding(t *testing.T) {
	busy := answer{status: 503, retryAfter: "0", body: `{"error":"busy"}`}
	c, s := newScripted(t, Options{MaxAttempts: 3}, busy, answer{202, "", accepted1}, answer{202, "", accepted1})
	sec := time.Date(2026, 12, 1, 10, 0, 7, 500_000_000, time.UTC)
	vc := ViewCount{ItemID: "short-1", Second: sec, Count: 120000, SourceID: "edge-eu-3", Seq: 991}
	if err := c.SendViewCount(context.Background(), vc); err != nil {
		t.Fatal(err)
	}
	want := `{"item_id":"short-1","second":1796119207,"count":120000,"source_id":"edge-eu-3","seq":991}`
	if len(s.bodies) != 2 || s.bodies[0] != want || s.bodies[1] != want {
		t.Fatalf("bodies: got %q; want two of %s", s.bodies, want)
	}
	if _, err := c.SendEvents(context.Background(), []Event{vc}); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(s.bodies[2])), &line); err != nil || line["type"] != "view_count" || line["seq"] != float64(991) {
		t.Errorf("event line: got %s (%v); want type view_count and seq 991", s.bodies[2], err)
	}
}
