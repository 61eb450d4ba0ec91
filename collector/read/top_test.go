package read

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/schemas"
)

// TestTop serves what topk put in Redis, cut to k, and says 503 while nothing is published.
func TestTop(t *testing.T) {
	c := &clock{t: time.Now()}
	_, srv := newTestHandler(t, c)
	cl := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer cl.Close()
	var e struct{ Error string }
	if code := getJSON(t, srv.URL+"/v1/top?kind=ads&window=1h", &e); code != 503 || !strings.Contains(e.Error, "no top-K list") {
		t.Errorf("before any publish: got %d %q; want 503 saying no list", code, e.Error)
	}
	bound := uint64(12)
	list := schemas.TopList{Kind: "ads", Window: "24h", ComputedAt: time.Now().UTC().Truncate(time.Millisecond), ErrorBound: &bound}
	for i := range 300 {
		list.Entries = append(list.Entries, schemas.TopEntry{Rank: i + 1, Key: fmt.Sprintf("ad-%d", i), Count: uint64(1000 - i)})
	}
	b, _ := json.Marshal(list)
	if err := cl.Set(context.Background(), schemas.TopRedisKey(schemas.CountAds, "24h"), b, 0).Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		query string
		want  int
	}{{"", 100}, {"&k=1", 1}, {"&k=250", 250}, {"&k=1000", 300}}
	for _, tt := range tests {
		t.Run("k"+tt.query, func(t *testing.T) {
			var got schemas.TopList
			if code := getJSON(t, srv.URL+"/v1/top?kind=ads&window=24h"+tt.query, &got); code != 200 {
				t.Fatalf("got %d; want 200", code)
			}
			if len(got.Entries) != tt.want || got.Entries[0].Key != "ad-0" || got.ErrorBound == nil || *got.ErrorBound != 12 || !got.ComputedAt.Equal(list.ComputedAt) {
				t.Errorf("got %d entries, first %v, bound %v, computed_at %s; want %d, ad-0, 12, %s",
					len(got.Entries), got.Entries[:1], got.ErrorBound, got.ComputedAt, tt.want, list.ComputedAt)
			}
		})
	}
}

func TestTopBadParameters(t *testing.T) {
	c := &clock{t: time.Now()}
	_, srv := newTestHandler(t, c)
	tests := []struct {
		query, field string
	}{
		{"", "kind"},
		{"window=1m", "kind"},
		{"kind=posts&window=1m", "kind"},
		{"kind=items", "window"},
		{"kind=items&window=5m", "window"},
		{"kind=items&window=1M", "window"},
		{"kind=items&window=1m&k=0", "k"},
		{"kind=items&window=1m&k=1001", "k"},
		{"kind=items&window=1m&k=-5", "k"},
		{"kind=items&window=1m&k=ten", "k"},
		{"kind=items&window=1m&k=", "k"},
		{"kind=items&window=1m&k=99999999999999999999", "k"},
		{"kind=items&kind=ads&window=1m", "kind"},
		{"kind=items&window=1m&window=1h", "window"},
		{"kind=items&window=1m&limit=5", "limit"},
		{"kind=Ads&window=1m", "kind"},
		{"kind=ads", "window"},
		{"kind=ads&window=2m", "window"},
		{"kind=ads&window=1h&k=1001", "k"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			var e struct{ Error, Field string }
			if code := getJSON(t, srv.URL+"/v1/top?"+tt.query, &e); code != 400 || e.Field != tt.field {
				t.Errorf("got %d field %q (%s); want 400 naming %s", code, e.Field, e.Error, tt.field)
			}
		})
	}
}

// FuzzParseTopQuery checks that no query string panics the parser and that what it accepts is
// in range.
func FuzzParseTopQuery(f *testing.F) {
	for _, s := range []string{"kind=items&window=1m", "kind=ads&window=24h&k=1000", "kind=items&window=1h&k=0", "k=%zz", "kind=ads&kind=ads", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		got, err := ParseTopQuery(q)
		if err != nil {
			return
		}
		if got.K < 1 || got.K > schemas.MaxTopK || (got.Kind != schemas.CountItems && got.Kind != schemas.CountAds) || got.Window == "" {
			t.Fatalf("accepted %q as %+v", raw, got)
		}
	})
}
