package reports

import (
	"net/http/httptest"
	"net/url"
	"testing"
)

// FuzzParse feeds the report route's path value and query to parse: it never panics, and what
// it accepts is within the documented bounds.
func FuzzParse(f *testing.F) {
	f.Add("2026-11-28", "version=2&limit=10&after=ad-1")
	f.Add("2026-02-30", "")
	f.Add("2026-11-28", "version=0")
	f.Add("2026-11-28", "limit=100001&after=%00")
	f.Add("x", "version=-1")
	f.Add("2026-11-28", "by=device&after=phone")
	f.Add("2026-11-28", "by=Campaign")
	f.Fuzz(func(t *testing.T, date, query string) {
		r := httptest.NewRequest("GET", "/v1/reports/daily/x", nil)
		r.SetPathValue("date", date)
		r.URL.RawQuery = query
		q, err := parse(r)
		if err != nil {
			return
		}
		if q.date.Format("2006-01-02") != date {
			t.Fatalf("date %q accepted as %v", date, q.date)
		}
		if q.limit < 1 || q.limit > MaxLimit {
			t.Fatalf("limit %d accepted from %q", q.limit, query)
		}
		if q.by != ByAd && q.by != ByCampaign && q.by != ByDevice {
			t.Fatalf("by %q accepted from %q", q.by, query)
		}
		vals, _ := url.ParseQuery(query)
		if vals.Get("version") != "" && q.version == 0 {
			t.Fatalf("version %q accepted as latest", vals.Get("version"))
		}
	})
}
