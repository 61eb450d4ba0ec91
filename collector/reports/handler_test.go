package reports

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

var day = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)

func serve(t *testing.T, conn driver.Conn) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	New(Options{ClickHouse: conn, Logger: infra.Logger}).Register(api.NewRouter(mux, prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Client().CloseIdleConnections(); srv.Close() })
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// rows writes a version's rows, as the job does first; commit writes its version row last.
func rows(t *testing.T, ctx context.Context, conn driver.Conn, version uint32, ads ...AdCount) {
	t.Helper()
	for _, a := range ads {
		if err := conn.Exec(ctx, `INSERT INTO click_reports_daily (date, version, ad_id, exact_count, billable_count, computed_at)
			VALUES (?, ?, ?, ?, ?, now64(3))`, day, version, a.AdID, a.ExactCount, a.BillableCount); err != nil {
			t.Fatal(err)
		}
	}
}

// groups writes a version's rows by dimension, as the job does after its ad rows.
func groups(t *testing.T, ctx context.Context, conn driver.Conn, version uint32, dimension string, gs ...GroupCount) {
	t.Helper()
	for _, g := range gs {
		if err := conn.Exec(ctx, `INSERT INTO click_reports_by (date, version, dimension, value, exact_count, billable_count)
			VALUES (?, ?, ?, ?, ?, ?)`, day, version, dimension, g.Value, g.ExactCount, g.BillableCount); err != nil {
			t.Fatal(err)
		}
	}
}

func commit(t *testing.T, ctx context.Context, conn driver.Conn, version uint32, tot Totals) {
	t.Helper()
	if err := conn.Exec(ctx, `INSERT INTO click_report_versions
		(date, version, started_at, computed_at, source, ads, exact_count, billable_count, duplicates, fraud, records_read)
		VALUES (?, ?, now64(3), now64(3), 'kafka', ?, ?, ?, 0, 0, 0)`, day, version, tot.Ads, tot.ExactCount, tot.BillableCount); err != nil {
		t.Fatal(err)
	}
}

func TestDailyReport(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := infra.DB(t, ctx, "reports_daily")
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, conn)
	v1 := []AdCount{{"ad-a", 3, 2}, {"ad-b", 5, 5}, {"ad-c", 1, 0}}
	v2 := []AdCount{{"ad-a", 3, 1}, {"ad-b", 5, 5}, {"ad-c", 1, 0}}
	byCampaign := []GroupCount{{"camp-1", 8, 6}, {"camp-2", 1, 0}}
	byDevice := []GroupCount{{"desktop", 2, 1}, {"phone", 6, 5}, {"tablet", 1, 0}}

	type want struct {
		code      int
		version   uint32
		latest    uint32
		ads       []AdCount
		groups    []GroupCount
		nextAfter string
		errIn     string
	}
	check := func(t *testing.T, path string, w want) {
		t.Helper()
		code, body := get(t, srv, path)
		if code != w.code {
			t.Fatalf("GET %s: got %d %s; want %d", path, code, body, w.code)
		}
		if code != http.StatusOK {
			if !strings.Contains(body, w.errIn) {
				t.Fatalf("GET %s: got %s; want an error containing %q", path, body, w.errIn)
			}
			return
		}
		var d Daily
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		if d.Version != w.version || d.LatestVersion != w.latest || !slices.Equal(d.Ads, w.ads) || !slices.Equal(d.Groups, w.groups) ||
			d.NextAfter != w.nextAfter || !d.Final || d.Date != "2026-11-28" {
			t.Fatalf("GET %s: got %+v; want version %d latest %d ads %+v groups %+v next %q", path, d, w.version, w.latest, w.ads, w.groups, w.nextAfter)
		}
		if (w.ads != nil) != strings.Contains(body, `"ads":[`) || (w.groups != nil) != strings.Contains(body, `"groups":[`) {
			t.Fatalf("GET %s: got %s; want ads listed only by ad, groups only by campaign or device", path, body)
		}
	}
	steps := []struct {
		name   string
		before func()
		path   string
		want   want
	}{
		{"nothing yet", func() {}, "/v1/reports/daily/2026-11-28", want{code: 404, errIn: "no daily click report for 2026-11-28 yet"}},
		{"rows without their version row are invisible", func() { rows(t, ctx, conn, 1, v1...) }, "/v1/reports/daily/2026-11-28",
			want{code: 404, errIn: "no daily click report"}},
		{"complete version 1", func() { commit(t, ctx, conn, 1, Totals{3, 9, 7}) }, "/v1/reports/daily/2026-11-28", want{code: 200, version: 1, latest: 1, ads: v1}},
		{"version 2 being written stays invisible", func() { rows(t, ctx, conn, 2, v2[:2]...) }, "/v1/reports/daily/2026-11-28",
			want{code: 200, version: 1, latest: 1, ads: v1}},
		{"version 2 complete is the latest", func() { rows(t, ctx, conn, 2, v2[2]); commit(t, ctx, conn, 2, Totals{3, 9, 6}) },
			"/v1/reports/daily/2026-11-28", want{code: 200, version: 2, latest: 2, ads: v2}},
		{"version 1 still there", func() {}, "/v1/reports/daily/2026-11-28?version=1", want{code: 200, version: 1, latest: 2, ads: v1}},
		{"by campaign, of a version with no breakdown", func() {}, "/v1/reports/daily/2026-11-28?by=campaign",
			want{code: 404, errIn: "version 2 of the daily click report for 2026-11-28 has no breakdown by campaign"}},
		{"by campaign", func() {
			rows(t, ctx, conn, 3, v2...)
			groups(t, ctx, conn, 3, "campaign", byCampaign...)
			groups(t, ctx, conn, 3, "device", byDevice...)
			commit(t, ctx, conn, 3, Totals{3, 9, 6})
		}, "/v1/reports/daily/2026-11-28?by=campaign", want{code: 200, version: 3, latest: 3, groups: byCampaign}},
		{"by device, a page", func() {}, "/v1/reports/daily/2026-11-28?by=device&limit=1&after=desktop",
			want{code: 200, version: 3, latest: 3, groups: byDevice[1:2], nextAfter: "phone"}},
		{"by ad is the default", func() {}, "/v1/reports/daily/2026-11-28?by=ad&version=3", want{code: 200, version: 3, latest: 3, ads: v2}},
		{"by something else", func() {}, "/v1/reports/daily/2026-11-28?by=country", want{code: 400, errIn: `"field":"by"`}},
		// What an attacker might try on the new parameter: case, quoting, a Unicode space, a
		// second value, SQL in after.
		{"by in capitals", func() {}, "/v1/reports/daily/2026-11-28?by=Campaign", want{code: 400, errIn: `"field":"by"`}},
		{"by quoted", func() {}, "/v1/reports/daily/2026-11-28?by=%27campaign%27", want{code: 400, errIn: `"field":"by"`}},
		{"by with an em space", func() {}, "/v1/reports/daily/2026-11-28?by=campaign%E2%80%83", want{code: 400, errIn: `"field":"by"`}},
		{"by given twice: the first counts", func() {}, "/v1/reports/daily/2026-11-28?by=country&by=campaign", want{code: 400, errIn: `"field":"by"`}},
		{"after with SQL", func() {}, "/v1/reports/daily/2026-11-28?by=device&after=x%27%20OR%201%3D1--", want{code: 400, errIn: `"field":"after"`}},
		{"first page", func() {}, "/v1/reports/daily/2026-11-28?version=2&limit=2", want{code: 200, version: 2, latest: 3, ads: v2[:2], nextAfter: "ad-b"}},
		{"last page", func() {}, "/v1/reports/daily/2026-11-28?version=2&limit=2&after=ad-b", want{code: 200, version: 2, latest: 3, ads: v2[2:]}},
		{"exact page end", func() {}, "/v1/reports/daily/2026-11-28?version=2&limit=3", want{code: 200, version: 2, latest: 3, ads: v2}},
		{"unknown version", func() {}, "/v1/reports/daily/2026-11-28?version=4", want{code: 404, errIn: "no version 4 of the daily click report for 2026-11-28; the latest is 3"}},
		{"another date", func() {}, "/v1/reports/daily/2026-11-27", want{code: 404, errIn: "no daily click report for 2026-11-27"}},
		{"bad date", func() {}, "/v1/reports/daily/28-11-2026", want{code: 400, errIn: `"field":"date"`}},
		{"impossible date", func() {}, "/v1/reports/daily/2026-02-30", want{code: 400, errIn: `"field":"date"`}},
		{"version 0", func() {}, "/v1/reports/daily/2026-11-28?version=0", want{code: 400, errIn: `"field":"version"`}},
		{"version not a number", func() {}, "/v1/reports/daily/2026-11-28?version=latest", want{code: 400, errIn: `"field":"version"`}},
		{"limit too large", func() {}, "/v1/reports/daily/2026-11-28?limit=100001", want{code: 400, errIn: `"field":"limit"`}},
		{"bad after", func() {}, "/v1/reports/daily/2026-11-28?after=a%20b", want{code: 400, errIn: `"field":"after"`}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.before()
			check(t, s.path, s.want)
		})
	}
}
