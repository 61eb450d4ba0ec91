package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The click path's crash test load; TALLY_EO_CLICKS overrides the click count.
const (
	eoClicks      = 150_000
	eoClickBatch  = 2000
	eoClickRate   = 15_000           // per second, so that kills land while clicks are posted too
	clickWindow   = 10 * time.Minute // clicks.dedupe_window and clicks.dedupe_grace defaults
	clickMinKills = 4
)

// TestClicksExactlyOnceThroughCrashes posts clicks (half on one hot ad, double taps inside the
// 10-minute window and repeats outside it, some late) and fraud verdicts (late, repeated and
// reversed) through the collector while two aggregator processes and the infrastructure process
// (Kafka, ClickHouse, Redis) are SIGKILLed at random. Afterwards every (ad, minute) count and
// billable count, and every hour rollup, must equal an oracle computed from the log.
func TestClicksExactlyOnceThroughCrashes(t *testing.T) {
	t.Parallel() // asserts the end state alone (doc.go)
	n := eoClicks
	if s := os.Getenv("TALLY_EO_CLICKS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := startCluster(t, 2)

	var posted atomic.Int64
	stopChaos := make(chan struct{})
	chaosDone := make(chan [2]int)
	go func() {
		rng := rand.New(rand.NewPCG(44, 1))
		var aggKills, infraKills int
		defer func() { chaosDone <- [2]int{aggKills, infraKills} }()
		for {
			select {
			case <-stopChaos:
				if aggKills >= clickMinKills && infraKills >= clickMinKills {
					return
				}
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			p := c.aggs[rng.IntN(len(c.aggs))]
			if infraKills < aggKills {
				p = c.infra
			}
			_ = p.stop(syscall.SIGKILL, 10*time.Second)
			if p == c.infra {
				infraKills++
				t.Logf("infra killed after %d clicks", posted.Load())
			} else {
				aggKills++
			}
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
			if err := p.start(); err != nil {
				t.Errorf("restart %s: %v", p.name, err)
				return
			}
		}
	}()

	t0 := time.Now()
	if err := postClicks(ctx, c.api, n, &posted); err != nil {
		t.Fatal(err)
	}
	t.Logf("posted %d clicks and their verdicts in %s", n, time.Since(t0).Round(time.Millisecond))
	close(stopChaos)
	kills := <-chaosDone
	if kills[0] < clickMinKills || kills[1] < clickMinKills {
		t.Fatalf("got %d aggregator and %d infra kills; want at least %d of each", kills[0], kills[1], clickMinKills)
	}
	t.Logf("aggregators killed %d times, infra %d times", kills[0], kills[1])
	testinfra.WaitHTTP(t, time.Minute, "http://"+c.clickhouse+"/ping")
	testinfra.WaitHTTP(t, time.Minute, c.api+"/readyz")
	verifyClicks(t, ctx, c.kc, c.ch)
}

// postClicks posts n clicks in NDJSON batches to /v1/events and, after each batch, fraud
// verdicts for some clicks posted so far to /v1/fraud-verdicts, retrying 503s (the infra may
// be down) until each batch is accepted whole.
func postClicks(ctx context.Context, api string, n int, posted *atomic.Int64) error {
	client := &http.Client{Timeout: 60 * time.Second}
	send := func(path string, body []byte) error { return postAccepted(ctx, client, api+path, body) }
	rng := rand.New(rand.NewPCG(8, 8))
	base := time.Now().Add(-120 * time.Minute).UnixMilli() // the latest repeat stays 10 minutes in the past
	type sent struct{ id, ad string }
	var recent []sent
	var clicks, verdicts bytes.Buffer
	start := time.Now()
	for i := 0; i < n; i++ {
		if i%eoClickBatch == 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / eoClickRate)))
		}
		ad := "ad-hot"
		if rng.IntN(2) == 0 {
			ad = "ad-" + strconv.Itoa(rng.IntN(500))
		}
		id := "k" + strconv.Itoa(i)
		ts := base + int64(i)*(80*eoEventMinute)/int64(n) + rng.Int64N(1000)
		switch r := rng.IntN(20); {
		case r < 3 && len(recent) > 0: // a double tap or retry: same id, a moment later
			s := recent[rng.IntN(len(recent))]
			id, ad = s.id, s.ad
		case r < 4 && len(recent) > 0: // the same id much later (counted again past the window)
			s := recent[rng.IntN(len(recent))]
			id, ad = s.id, s.ad
			ts += rng.Int64N(30 * eoEventMinute)
		case r < 5:
			ts -= rng.Int64N(25 * eoEventMinute) // late
		}
		score := ""
		if rng.IntN(10) == 0 {
			score = fmt.Sprintf(`,"fraud_score":%.2f`, rng.Float64())
		}
		fmt.Fprintf(&clicks, `{"type":"click","click_id":%q,"ad_id":%q,"campaign_id":%q,"user_hash":"u%d","ip_hash":"h%d","device":%q,"ts":%d%s}`+"\n",
			id, ad, clickCampaign(ad), rng.IntN(1000), rng.IntN(1000), clickDevice(id), ts, score)
		if len(recent) < 5000 {
			recent = append(recent, sent{id, ad})
		} else {
			recent[rng.IntN(len(recent))] = sent{id, ad}
		}
		if rng.IntN(25) == 0 && len(recent) > 0 { // a verdict, maybe a repeat or a reversal
			s := recent[rng.IntN(len(recent))]
			v := "fraud"
			if rng.IntN(4) == 0 {
				v = "valid"
			}
			fmt.Fprintf(&verdicts, `{"click_id":%q,"ad_id":%q,"verdict":%q,"reason":"test","decided_at":%d}`+"\n",
				s.id, s.ad, v, time.Now().UnixMilli()-rng.Int64N(3_600_000))
		}
		if (i+1)%eoClickBatch == 0 || i == n-1 {
			if err := send("/v1/events", clicks.Bytes()); err != nil {
				return err
			}
			posted.Add(int64(bytes.Count(clicks.Bytes(), []byte{'\n'})))
			clicks.Reset()
			if verdicts.Len() > 0 {
				if err := send("/v1/fraud-verdicts", verdicts.Bytes()); err != nil {
					return err
				}
				verdicts.Reset()
			}
		}
	}
	return nil
}

// postAccepted posts an NDJSON body to url, retrying 503s (the infra may be down, or the
// process restarting) until it is accepted whole.
func postAccepted(ctx context.Context, client *http.Client, url string, body []byte) error {
	for attempt := 0; ; attempt++ {
		resp, err := client.Post(url, "application/x-ndjson", bytes.NewReader(body))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted && !bytes.Contains(b, []byte(`"rejected":[{`)) {
				return nil
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				return fmt.Errorf("post %s: got %d %s; want 202 with no rejection", url, resp.StatusCode, b[:min(len(b), 300)])
			}
		}
		if ctx.Err() != nil || attempt > 600 {
			return fmt.Errorf("post %s: gave up after %d attempts: %v", url, attempt, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type adMinute struct {
	ad     string
	minute int64
}

type clickCount struct{ clicks, billable int64 }

// verifyClicks waits until the click checkpoints reach the end of both topics, then compares
// every (ad, minute) and, once rolled up, every (ad, hour) with the oracle, and returns the
// oracle's counted clicks.
func verifyClicks(t *testing.T, ctx context.Context, kc kafkaConn, ch chclient.Options) []oracleClick {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := kc.client(logger)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ends kadm.ListedOffsets
	testinfra.WaitFor(t, time.Minute, "the log's end offsets", func() (bool, string) {
		var err error
		ends, err = kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicClicks, schemas.TopicFraudVerdicts)
		if err == nil {
			err = ends.Error()
		}
		return err == nil, fmt.Sprint(err)
	})
	conn, err := chclient.Open(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testinfra.WaitForEvery(t, 4*time.Minute, 200*time.Millisecond, "click aggregators catch up", func() (bool, string) {
		rows, err := conn.Query(ctx, "SELECT partition, max(clicks_end), max(verdicts_end) FROM click_deltas WHERE ad_id = '' GROUP BY partition")
		if err != nil {
			return false, err.Error()
		}
		defer rows.Close()
		got := map[int32][2]int64{}
		for rows.Next() {
			var p uint16
			var c, v int64
			if err := rows.Scan(&p, &c, &v); err != nil {
				return false, err.Error()
			}
			got[int32(p)] = [2]int64{c, v}
		}
		behind := ""
		ends.Each(func(o kadm.ListedOffset) {
			i := 0
			if o.Topic == schemas.TopicFraudVerdicts {
				i = 1
			}
			if o.Offset > 0 && got[o.Partition][i] < o.Offset {
				behind += fmt.Sprintf(" %s/%d at %d of %d", o.Topic, o.Partition, got[o.Partition][i], o.Offset)
			}
		})
		return behind == "", "behind:" + behind
	})
	all, fraud := countedClicks(t, ctx, cl, ends)
	want := byMinute(all, fraud, func(c oracleClick) string { return c.ad })
	gotMinutes, err := clickCounts(ctx, conn, `SELECT ad_id, toInt64(toUnixTimestamp(minute)), sum(clicks), sum(billable) FROM click_deltas WHERE ad_id != '' GROUP BY ad_id, minute`)
	if err != nil {
		t.Fatal(err)
	}
	var total clickCount
	for _, c := range want {
		total.clicks += c.clicks
		total.billable += c.billable
	}
	t.Logf("oracle: %d clicks counted in %d (ad, minute) buckets, %d billable", total.clicks, len(want), total.billable)
	if d := diffClicks(gotMinutes, want); len(d) > 0 {
		t.Errorf("%d (ad, minute) buckets differ from the oracle: %v", len(d), d[:min(len(d), 10)])
	}
	wantHours := hoursOf(want)
	var d []string
	testinfra.WaitFor(t, time.Minute, "hour rollups match the oracle", func() (bool, string) {
		got, err := clickCounts(ctx, conn, `SELECT ad_id, toInt64(toUnixTimestamp(hour)), clicks, billable FROM clicks_by_hour FINAL`)
		if err != nil {
			return false, err.Error()
		}
		d = diffClicks(got, wantHours)
		return len(d) == 0, fmt.Sprint(d[:min(len(d), 10)])
	})
	verifyClickGroups(t, ctx, conn, all, fraud)
	return all
}

// clickCampaign and clickDevice are what the posted clicks carry: the campaign follows from
// the ad, the device from the click id, so that a click posted again carries the same ones.
func clickCampaign(ad string) string { return "cmp-" + strconv.Itoa(len(ad)%3) }

func clickDevice(id string) string { return []string{"web", "ios", "android"}[int(id[len(id)-1])%3] }

// verifyClickGroups compares every (campaign, minute), (device, minute) and, once rolled up,
// (campaign, hour) and (device, hour) with the oracle: the sums over each group's ads.
func verifyClickGroups(t *testing.T, ctx context.Context, conn driver.Conn, all []oracleClick, fraud map[string]bool) {
	t.Helper()
	for _, g := range []struct {
		column string
		key    func(oracleClick) string
	}{
		{"campaign_id", func(c oracleClick) string { return clickCampaign(c.ad) }},
		{"device", func(c oracleClick) string { return clickDevice(c.id) }},
	} {
		want := byMinute(all, fraud, g.key)
		got, err := clickCounts(ctx, conn, `SELECT `+g.column+`, toInt64(toUnixTimestamp(minute)), sum(clicks), sum(billable)
			FROM click_deltas WHERE ad_id != '' GROUP BY `+g.column+`, minute`)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffClicks(got, want); len(d) > 0 {
			t.Errorf("%d (%s, minute) buckets differ from the oracle: %v", len(d), g.column, d[:min(len(d), 10)])
		}
		testinfra.WaitFor(t, time.Minute, g.column+" hours match the oracle", func() (bool, string) {
			got, err := clickCounts(ctx, conn, `SELECT `+g.column+`, toInt64(toUnixTimestamp(hour)) AS h, sum(c), sum(b) FROM (
					SELECT campaign_id, device, ad_id, hour, argMax(clicks, version) AS c, argMax(billable, version) AS b
					FROM click_group_hours GROUP BY campaign_id, device, ad_id, hour
				) GROUP BY `+g.column+`, h`)
			if err != nil {
				return false, err.Error()
			}
			d := diffClicks(got, hoursOf(want))
			return len(d) == 0, fmt.Sprint(d[:min(len(d), 10)])
		})
	}
}

// hoursOf sums per-minute counts per hour.
func hoursOf(minutes map[adMinute]clickCount) map[adMinute]clickCount {
	out := map[adMinute]clickCount{}
	for k, c := range minutes {
		h := adMinute{k.ad, k.minute - k.minute%3600}
		s := out[h]
		out[h] = clickCount{s.clicks + c.clicks, s.billable + c.billable}
	}
	return out
}

func clickCounts(ctx context.Context, conn driver.Conn, q string) (map[adMinute]clickCount, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[adMinute]clickCount{}
	for rows.Next() {
		var k adMinute
		var c clickCount
		if err := rows.Scan(&k.ad, &k.minute, &c.clicks, &c.billable); err != nil {
			return nil, err
		}
		if c != (clickCount{}) {
			out[k] = c
		}
	}
	return out, rows.Err()
}

func diffClicks(got, want map[adMinute]clickCount) []string {
	var out []string
	for k, w := range want {
		if g := got[k]; g != w {
			out = append(out, fmt.Sprintf("%s@%d: got %+v; want %+v", k.ad, k.minute, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s@%d: got %+v; want nothing", k.ad, k.minute, g))
		}
	}
	sort.Strings(out)
	return out
}

// byMinute sums the oracle's clicks per (key, minute), counted and billable: key is what a click
// counts under (its ad, campaign or device).
func byMinute(all []oracleClick, fraud map[string]bool, key func(oracleClick) string) map[adMinute]clickCount {
	out := map[adMinute]clickCount{}
	for _, c := range all {
		k := adMinute{key(c), schemas.FloorDiv(c.ts, 60_000) * 60}
		s := out[k]
		s.clicks++
		if !fraud[c.id] {
			s.billable++
		}
		out[k] = s
	}
	return out
}

// oracleClick is a click the oracle counts.
type oracleClick struct {
	id, ad string
	ts     int64
}

// countedClicks reads both topics whole and applies the streaming rule of docs/EXACTLY_ONCE.md
// ("Clicks") independently of package clicks: per partition, in offset order, a click counts
// unless a counted click of the same id and ad still held (not older than window + grace behind
// the newest click) lies within the window of it; it is billable unless the id's latest verdict
// (a later decided_at wins, fraud a tie) is fraud (fraud holds those ids). No fraud_score
// threshold is configured.
func countedClicks(t *testing.T, ctx context.Context, cl *kgo.Client, ends kadm.ListedOffsets) (all []oracleClick, fraud map[string]bool) {
	window, horizon := clickWindow.Milliseconds(), (2 * clickWindow).Milliseconds()
	offsets := map[string]map[int32]kgo.Offset{schemas.TopicClicks: {}, schemas.TopicFraudVerdicts: {}}
	remaining := 0
	type pos struct {
		topic string
		p     int32
	}
	next := map[pos]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		offsets[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		if o.Offset > 0 {
			remaining++
		}
	})
	cl.AddConsumePartitions(offsets)
	type verdict struct {
		fraud   bool
		decided int64
	}
	watermark := map[int32]int64{}
	held := map[string][]int64{}
	latest := map[string]verdict{}
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("oracle: read log: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, _ := ends.Lookup(r.Topic, r.Partition)
			k := pos{r.Topic, r.Partition}
			if r.Offset >= end.Offset {
				return
			}
			if r.Offset != next[k] {
				t.Fatalf("oracle: %s/%d: got offset %d; want %d", r.Topic, r.Partition, r.Offset, next[k])
			}
			next[k]++
			if next[k] == end.Offset {
				remaining--
			}
			if r.Topic == schemas.TopicFraudVerdicts {
				v, err := schemas.DecodeFraudVerdict(r.Value)
				if err != nil {
					t.Fatalf("oracle: decode verdict: %v", err)
				}
				nv := verdict{v.Verdict == schemas.VerdictFraud, v.DecidedAt}
				cur, ok := latest[v.ClickID]
				if !ok || nv.decided > cur.decided || nv.decided == cur.decided && nv.fraud {
					latest[v.ClickID] = nv
				}
				return
			}
			c, err := schemas.DecodeClick(r.Value)
			if err != nil {
				t.Fatalf("oracle: decode click: %v", err)
			}
			wm, ok := watermark[r.Partition]
			if !ok {
				wm = math.MinInt64
			}
			wm = max(wm, c.TS)
			watermark[r.Partition] = wm
			key := c.ClickID + "\x00" + c.AdID
			keep := held[key][:0]
			counts := true
			for _, h := range held[key] {
				if h < wm-horizon {
					continue
				}
				keep = append(keep, h)
				if c.TS-h < window && h-c.TS < window {
					counts = false
				}
			}
			if counts && c.TS >= wm-horizon {
				keep = append(keep, c.TS)
			}
			held[key] = keep
			if counts {
				all = append(all, oracleClick{c.ClickID, c.AdID, c.TS})
			}
		})
	}
	fraud = map[string]bool{}
	for id, v := range latest {
		fraud[id] = v.fraud
	}
	return all, fraud
}
