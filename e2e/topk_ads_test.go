package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// postRecentClicks posts n clicks at about perSecond, timed around the moment they are posted
// so that topk's 1m and 1h windows hold them: most within 20 s before to 60 s after it (the 1m
// window still holds some when checked), a fifth double taps of a recent click seconds later
// (the click-id rule counts them once), some repeats of an id 12 minutes earlier (outside the
// 10-minute window: counted again) and some up to 30 minutes late. Ads follow a Zipf law, so the
// lists have a head and ties in the tail. Campaign and device follow clickCampaign and
// clickDevice, as the crash tests' oracle expects.
func postRecentClicks(ctx context.Context, api string, n, perSecond int, posted *atomic.Int64) error {
	const batch = 500
	client := &http.Client{Timeout: 60 * time.Second}
	rng := rand.New(rand.NewPCG(9, 9))
	zipf := rand.NewZipf(rng, 1.2, 1, 400)
	type sent struct {
		id, ad string
		ts     int64
	}
	var recent []sent
	var buf bytes.Buffer
	start := time.Now()
	for i := range n {
		if i%batch == 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
		}
		now := time.Now().UnixMilli()
		c := sent{"r" + strconv.Itoa(i), "ad-" + strconv.FormatUint(zipf.Uint64(), 10), now - 20_000 + rng.Int64N(80_000)}
		switch r := rng.IntN(20); {
		case r < 4 && len(recent) > 0: // a double tap: counted once
			c = recent[rng.IntN(len(recent))]
			c.ts += rng.Int64N(5000)
		case r < 5 && len(recent) > 0: // the same id 12 minutes earlier: counted again
			c = recent[rng.IntN(len(recent))]
			c.ts -= 12 * eoEventMinute
		case r < 7:
			c.ts = now - rng.Int64N(30*eoEventMinute)
		}
		fmt.Fprintf(&buf, `{"type":"click","click_id":%q,"ad_id":%q,"campaign_id":%q,"user_hash":"u1","ip_hash":"h1","device":%q,"ts":%d}`+"\n",
			c.id, c.ad, clickCampaign(c.ad), clickDevice(c.id), c.ts)
		if len(recent) < 2000 {
			recent = append(recent, c)
		} else {
			recent[rng.IntN(len(recent))] = c
		}
		if (i+1)%batch == 0 || i == n-1 {
			if err := postAccepted(ctx, client, api+"/v1/events", buf.Bytes()); err != nil {
				return err
			}
			posted.Add(int64(bytes.Count(buf.Bytes(), []byte{'\n'})))
			buf.Reset()
		}
	}
	return nil
}

// adsOracle is the exact ads list over [from, to) from the oracle's counted clicks: clicks per
// ad by event-time second, count descending, then ad ascending, at most k entries.
func adsOracle(all []oracleClick, from, to time.Time, k int) []schemas.TopEntry {
	n := map[string]uint64{}
	for _, c := range all {
		if s := schemas.FloorDiv(c.ts, 1000); s >= from.Unix() && s < to.Unix() {
			n[c.ad]++
		}
	}
	out := make([]schemas.TopEntry, 0, len(n))
	for ad, c := range n {
		out = append(out, schemas.TopEntry{Key: ad, Count: c})
	}
	slices.SortFunc(out, func(a, b schemas.TopEntry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	out = out[:min(k, len(out))]
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// verifyAdsTop waits until GET /v1/top?kind=ads answers, for 1m and 1h, the oracle's exact list
// over the range the list states, and for 24h counts within the stated bound; the 1h list must
// not be empty (the clicks were posted minutes ago).
func verifyAdsTop(t *testing.T, all []oracleClick, api string) {
	t.Helper()
	for _, w := range schemas.TopWindows {
		t.Run("ads "+w+" list", func(t *testing.T) {
			testinfra.WaitFor(t, 2*time.Minute, "the ads "+w+" list equal to the oracle's", func() (bool, string) {
				resp, err := http.Get(api + "/v1/top?kind=ads&window=" + w + "&k=" + strconv.Itoa(schemas.MaxTopK))
				if err != nil {
					return false, err.Error()
				}
				defer resp.Body.Close()
				var l schemas.TopList
				if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
					return false, fmt.Sprintf("got %d", resp.StatusCode)
				}
				if w == "1h" && len(l.Entries) == 0 {
					return false, "empty 1h list"
				}
				if l.Exact {
					want := adsOracle(all, l.From, l.To, schemas.MaxTopK)
					if !slices.Equal(l.Entries, want) {
						return false, fmt.Sprintf("[%s, %s): got %d entries %v; want %d %v", l.From, l.To,
							len(l.Entries), l.Entries[:min(3, len(l.Entries))], len(want), want[:min(3, len(want))])
					}
					t.Logf("%s: %d entries equal the oracle's, top %v", w, len(l.Entries), l.Entries[:min(3, len(l.Entries))])
					return true, ""
				}
				truth := map[string]uint64{}
				for _, e := range adsOracle(all, l.From, l.To, 1<<30) {
					truth[e.Key] = e.Count
				}
				if l.ErrorBound == nil || len(l.Entries) == 0 {
					return false, "no 24h entries or bound"
				}
				for _, e := range l.Entries {
					if d := max(e.Count, truth[e.Key]) - min(e.Count, truth[e.Key]); d > *l.ErrorBound {
						return false, fmt.Sprintf("%s: got %d, true %d; want within %d", e.Key, e.Count, truth[e.Key], *l.ErrorBound)
					}
				}
				return true, ""
			})
		})
	}
}
