package load

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestViewBatchFill(t *testing.T) {
	b := newViewBatch("run1", 2000)
	rng := rand.New(rand.NewPCG(1, 2))
	b.fill(rng, 0.5, 10, 1000)
	hot, lines := 0, 0
	items := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b.buf))
	for sc.Scan() {
		lines++
		var v struct {
			Type     string `json:"type"`
			ItemID   string `json:"item_id"`
			ViewerID string `json:"viewer_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %d %q: %v", lines, sc.Text(), err)
		}
		if v.Type != "view" || !strings.HasPrefix(v.ItemID, "run1-i") || !strings.HasPrefix(v.ViewerID, "v") {
			t.Fatalf("line %d: got %+v; want a view of a run1 item", lines, v)
		}
		items[v.ItemID] = true
		if v.ItemID == itemID("run1", 0) {
			hot++
		}
	}
	if lines != 2000 {
		t.Errorf("got %d lines; want 2000", lines)
	}
	if hot < 900 || hot > 1100 {
		t.Errorf("got %d hot lines of 2000; want about half", hot)
	}
	if len(items) != 11 {
		t.Errorf("got %d distinct items; want 11 (hot + 10)", len(items))
	}
	before := bytes.Clone(b.buf)
	b.fill(rng, 0.5, 10, 1000)
	if bytes.Equal(before, b.buf) {
		t.Error("second fill: got the same body; want fresh draws")
	}
	if len(before) != len(b.buf) {
		t.Errorf("second fill: got %d bytes; want the layout kept at %d", len(b.buf), len(before))
	}
}

func TestItemIDAndDigits(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"hot", itemID("p", 0), "p-i00000000"},
		{"large", itemID("p", 10_000_000), "p-i10000000"},
		{"digits", string(appendDigits([]byte("x"), 42, 5)), "x00042"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q; want %q", tt.got, tt.want)
			}
		})
	}
}

func TestJSONInt(t *testing.T) {
	tests := []struct {
		name, body, key string
		want            int64
		wantOK          bool
	}{
		{"likes", `{"item_id":"a","user_id":"u","liked":true,"likes":1031}`, "likes", 1031, true},
		{"negative", `{"likes":-3}`, "likes", -3, true},
		{"spaces", `{"accepted": 1000, "rejected":[]}`, "accepted", 1000, true},
		{"absent", `{"error":"x"}`, "likes", 0, false},
		{"not a number", `{"likes":"many"}`, "likes", 0, false},
		{"key is not a prefix match", `{"liked":true,"likes":2}`, "like", 0, false},
		{"first occurrence", `{"views":1,"unique_viewers":1,"views_x":5}`, "views", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := jsonInt([]byte(tt.body), tt.key)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got %d %v; want %d %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestPickIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name     string
		n, limit int
		wantLen  int
	}{
		{"20 of 10001", 20, 10001, 20},
		{"all when the pool is small", 20, 5, 5},
		{"none", 0, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pickIDs(rng, tt.n, tt.limit)
			seen := map[int]bool{}
			for _, i := range got {
				if i < 0 || i >= tt.limit || seen[i] {
					t.Fatalf("got %v; want distinct ids in [0,%d)", got, tt.limit)
				}
				seen[i] = true
			}
			if len(got) != tt.wantLen {
				t.Errorf("got %d ids; want %d", len(got), tt.wantLen)
			}
		})
	}
}
