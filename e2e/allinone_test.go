package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/allinone/allinonetest"
	"github.com/tallypipeline/tally/client"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestAllInOne runs the whole pipeline in-process on the embedded defaults, as `pipeline run`
// does, and checks the walking skeleton end to end.
func TestAllInOne(t *testing.T) {
	r := allinonetest.Start(t, "--demo.enabled=true", "--demo.rate", "500", "--demo.items", "5",
		"--collector.max_body_bytes", "65536", "--collector.max_lines", "100")
	cfg, api := r.Config, r.API
	ctx := context.Background()
	if code := post(t, api+"/v1/views", `{"item_id":"e2e-item","viewer_id":"v1"}`); code != 202 {
		t.Fatalf("POST /v1/views: got %d; want 202", code)
	}
	batch := `{"type":"view","item_id":"e2e-item","viewer_id":"v2"}
{"type":"view","item_id":"e2e-item","viewer_id":"v3","event_id":"e3"}
{"type":"view","item_id":"e2e-item","viewer_id":"v1"}
`
	if code := post(t, api+"/v1/events", batch); code != 202 {
		t.Fatalf("POST /v1/events: got %d; want 202", code)
	}

	conn, err := chclient.Open(ctx, chclient.Options{Addr: cfg.ClickHouse.Addr, Database: "tally", Username: cfg.ClickHouse.Username, Password: cfg.ClickHouse.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var views uint64
	waitFor(t, 30*time.Second, "e2e-item views in ClickHouse", func() bool {
		err := conn.QueryRow(ctx, "SELECT sum(views) FROM views_by_second WHERE item_id = ?", "e2e-item").Scan(&views)
		return err == nil && views == 3
	})
	t.Run("plain http client reads the row as dashboards", func(t *testing.T) {
		q := url.QueryEscape("SELECT item_id, sum(views) FROM tally.views_by_second WHERE item_id = 'e2e-item' GROUP BY item_id")
		req, _ := http.NewRequest("GET", "http://"+cfg.ClickHouse.Addr+"/?query="+q, nil)
		req.SetBasicAuth("dashboards", "")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if got, want := string(b), "e2e-item\t3\n"; resp.StatusCode != 200 || got != want {
			t.Errorf("got %d %q; want 200 %q", resp.StatusCode, got, want)
		}
	})
	t.Run("counts API", func(t *testing.T) { checkCounts(t, api) })
	t.Run("top-K API", func(t *testing.T) { checkTop(t, api) })
	t.Run("bad inputs", func(t *testing.T) { checkBadInputs(t, api) })
	t.Run("go client", func(t *testing.T) { checkClient(t, api, conn) })
	t.Run("live page in a browser", func(t *testing.T) { checkLivePage(t, api) })
	t.Run("migrations re-applied change nothing", func(t *testing.T) { checkMigrationsIdempotent(t, ctx, conn) })
	t.Run("demo workload rows", func(t *testing.T) {
		var n uint64
		waitFor(t, 30*time.Second, "demo rows", func() bool {
			err := conn.QueryRow(ctx, "SELECT count() FROM views_by_second WHERE startsWith(item_id, 'item-')").Scan(&n)
			return err == nil && n > 0
		})
	})

	if err := r.Stop(); err != nil {
		t.Errorf("shutdown: got %v; want a clean stop", err)
	}
}

// checkTop finds e2e-item's 3 views in the 1m list topk published, through the Go client.
func checkTop(t *testing.T, api string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(client.Options{BaseURL: api})
	if err != nil {
		t.Fatal(err)
	}
	var got client.TopList
	// The 5-second bucket of the views must be complete, then published (2 s).
	waitFor(t, 30*time.Second, "e2e-item in the 1m top-K list", func() bool {
		if got, err = c.Top(ctx, client.TopItems, client.Window1m, client.MaxTopK); err != nil {
			return false
		}
		for _, e := range got.Entries {
			if e.Key == "e2e-item" {
				return e.Count == 3
			}
		}
		return false
	})
	if got.Kind != client.TopItems || got.Window != client.Window1m || !got.Exact || !got.From.Before(got.To) || got.Entries[0].Rank != 1 {
		t.Errorf("got kind %q window %q exact %v from %v to %v first rank %d; want items, 1m, exact, from before to, rank 1",
			got.Kind, got.Window, got.Exact, got.From, got.To, got.Entries[0].Rank)
	}
	if _, err := c.Top(ctx, client.TopItems, "2m", 0); !client.IsStatus(err, 400) {
		t.Errorf("window=2m: got %v; want a 400 APIError", err)
	}
	if _, err := c.Top(ctx, client.TopAds, client.Window1h, client.MaxTopK+1); err == nil || client.IsStatus(err, 400) {
		t.Errorf("k over the maximum: got %v; want the client to refuse it before sending", err)
	}
}

// checkCounts reads e2e-item through the API: its views and unique viewers, then a like, which
// must show in the very next read.
func checkCounts(t *testing.T, api string) {
	type counts struct {
		ItemID        string `json:"item_id"`
		Views         uint64 `json:"views"`
		UniqueViewers uint64 `json:"unique_viewers"`
		Likes         int64  `json:"likes"`
	}
	var got counts
	// Unique viewers follow the views within aggregator.sketch_interval (5 s).
	waitFor(t, 20*time.Second, "e2e-item counts through the API", func() bool {
		resp, err := http.Get(api + "/v1/items/e2e-item/counts")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&got) == nil && got.Views == 3 && got.UniqueViewers == 3
	})
	if got != (counts{ItemID: "e2e-item", Views: 3, UniqueViewers: 3}) {
		t.Errorf("got %+v; want 3 views, 3 unique viewers, 0 likes", got)
	}
	waitFor(t, 10*time.Second, "like accepted", func() bool {
		req, _ := http.NewRequest(http.MethodPut, api+"/v1/items/e2e-item/likes/u1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	var batch struct{ Items []counts }
	resp, err := http.Get(api + "/v1/counts?ids=e2e-item,never-seen")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&batch); err != nil {
		t.Fatal(err)
	}
	want := []counts{{ItemID: "e2e-item", Views: 3, UniqueViewers: 3, Likes: 1}, {ItemID: "never-seen"}}
	if fmt.Sprint(batch.Items) != fmt.Sprint(want) {
		t.Errorf("got %+v; want %+v", batch.Items, want)
	}
}

func checkBadInputs(t *testing.T, api string) {
	tests := []struct {
		name, path, body string
		wantCode         int
		wantInBody       string
	}{
		{"malformed json", "/v1/views", `{"item_id":`, 400, `"field":"body"`},
		{"missing viewer", "/v1/views", `{"item_id":"i"}`, 400, `"field":"viewer_id"`},
		{"overlong item", "/v1/views", `{"item_id":"` + strings.Repeat("x", 200) + `","viewer_id":"v"}`, 400, `"field":"item_id"`},
		{"unknown field", "/v1/views", `{"item_id":"i","viewer_id":"v","colour":"red"}`, 400, `"field":"\"colour\""`},
		{"future ts", "/v1/views", `{"item_id":"i","viewer_id":"v","ts":"2999-01-01T00:00:00Z"}`, 400, `"field":"ts"`},
		{"body over limit", "/v1/views", strings.Repeat(" ", 70000), 413, `"field":"body"`},
		{"too many lines", "/v1/events", strings.Repeat(`{"type":"view","item_id":"i","viewer_id":"v"}`+"\n", 101), 413, "lines"},
		{"every line bad", "/v1/events", "{}\n{\"type\":\"view\"}\n", 400, `"line":2`},
		{"some lines bad", "/v1/events", `{"type":"view","item_id":"ok","viewer_id":"v"}` + "\nnot json\n", 202, `"accepted":1,"rejected":[{"line":2,"field":"body"`},
		{"empty batch", "/v1/events", "\n\n", 400, `"field":"body"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(api+tt.path, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantInBody) {
				t.Errorf("got %d %s; want %d containing %s", resp.StatusCode, b, tt.wantCode, tt.wantInBody)
			}
			if !json.Valid(b) {
				t.Errorf("got body %q; want JSON", b)
			}
		})
	}
	resp, err := http.Get(api + "/v1/views")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/views: got %d; want 405", resp.StatusCode)
	}
}

func checkMigrationsIdempotent(t *testing.T, ctx context.Context, conn driver.Conn) {
	snapshot := func() string {
		rows, err := conn.Query(ctx, "SELECT name, create_table_query FROM system.tables WHERE database = 'tally' ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var n, q string
			if err := rows.Scan(&n, &q); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, n, q)
		}
		var recorded uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM schema_migrations").Scan(&recorded); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&b, "recorded", recorded)
		return b.String()
	}
	before := snapshot()
	ms, err := migrate.Load()
	if err != nil {
		t.Fatal(err)
	}
	v, err := migrate.Apply(ctx, conn, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if want := ms[len(ms)-1].Version; v != want {
		t.Errorf("got schema version %d; want %d", v, want)
	}
	if after := snapshot(); after != before {
		t.Errorf("schema changed on re-apply:\nbefore %s\nafter %s", before, after)
	}
}

func post(t *testing.T, u, body string) int {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// waitFor is testinfra.WaitFor for conditions with nothing to explain.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	testinfra.WaitFor(t, d, what, func() (bool, string) { return ok(), "" })
}
