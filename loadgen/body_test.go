package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
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

func TestFeedPage(t *testing.T) {
	tests := []struct {
		name       string
		n, catalog int
		wantLen    int
	}{
		{"20 from 10,000", 20, 10_000, 20},
		{"20 from a million", 20, 1_000_000, 20},
		{"catalog smaller than the page", 20, 5, 6},
		{"the hot item alone", 1, 10_000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			for range 100 {
				got := feedPage(rng, tt.n, tt.catalog)
				if len(got) != tt.wantLen || got[0] != 0 {
					t.Fatalf("got %v; want %d ids, the hot item 0 first", got, tt.wantLen)
				}
				seen := map[int]bool{}
				for _, i := range got[1:] {
					if i < 1 || i > tt.catalog || seen[i] {
						t.Fatalf("got %v; want distinct catalog items in [1,%d]", got, tt.catalog)
					}
					seen[i] = true
				}
			}
		})
	}
}

// The catalog ids of feed pages are drawn uniformly: over 50,000 pages of 19 drawn ids from a
// catalog of 100 items, each item is drawn about 9,500 times (binomial, sd about 95).
func TestFeedPageUniform(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const pages, catalog = 50_000, 100
	counts := make([]int, catalog+1)
	for range pages {
		for _, i := range feedPage(rng, 20, catalog)[1:] {
			counts[i]++
		}
	}
	want := pages * 19 / catalog
	for i := 1; i <= catalog; i++ {
		if d := counts[i] - want; d < -500 || d > 500 {
			t.Errorf("item %d: drawn %d times; want %d +- 500", i, counts[i], want)
		}
	}
}

// Every line of a view count batch is one the collector accepts, with the item, second, count
// and a fresh seq drawn.
func TestViewCountBatchFill(t *testing.T) {
	b := newViewCountBatch("run1", 500, 2500).(*viewCountBatch)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	b.fill(rng, 0.5, 10, 1000)
	seqs := map[uint64]bool{}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(b.buf))
	for sc.Scan() {
		lines++
		c, err := schemas.ParseViewCountJSON(sc.Bytes(), true, now, schemas.TimeBounds{Future: time.Minute, Late: time.Hour})
		if err != nil {
			t.Fatalf("line %d %q: %v", lines, sc.Text(), err)
		}
		if !strings.HasPrefix(c.ItemID, "run1-i") || c.Count != 2500 || !strings.HasPrefix(c.SourceID, "run1-edge") {
			t.Fatalf("line %d: got %+v; want a count of 2500 views of a run1 item from a run1 source", lines, c)
		}
		seqs[c.Seq] = true
	}
	if lines != 500 || len(seqs) != 500 {
		t.Errorf("got %d lines with %d distinct seqs; want 500 and 500", lines, len(seqs))
	}
}

// Load clicks parse as the collector parses them, each ad always in one campaign, and spread
// over every device.
func TestClickBatchFill(t *testing.T) {
	b := newClickBatch("run1", 2000)
	b.fill(rand.New(rand.NewPCG(1, 2)), 0.5, 1500, 1000)
	now := time.Now()
	campaignOfAd := map[string]string{}
	devices := map[string]int{}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(b.body()))
	for sc.Scan() {
		lines++
		c, err := schemas.ParseClickJSON(sc.Bytes(), true, now, schemas.TimeBounds{Future: time.Minute, Late: time.Hour})
		if err != nil {
			t.Fatalf("line %d %q: %v", lines, sc.Text(), err)
		}
		if cmp, ok := campaignOfAd[c.AdID]; ok && cmp != c.CampaignID {
			t.Fatalf("line %d: ad %s in campaign %s; want %s, as before", lines, c.AdID, c.CampaignID, cmp)
		}
		campaignOfAd[c.AdID] = c.CampaignID
		devices[c.Device]++
	}
	campaigns := map[string]bool{}
	for _, cmp := range campaignOfAd {
		campaigns[cmp] = true
	}
	if lines != 2000 || len(devices) != deviceCount || len(campaigns) < campaignCount/2 {
		t.Errorf("got %d lines, %d devices, %d campaigns; want 2000, %d and at least %d", lines, len(devices), len(campaigns), deviceCount, campaignCount/2)
	}
}
