package collector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// A web page in a browser on the machine cannot use the loopback collector (auth off): another
// site's POST is refused whether the browser says so (Sec-Fetch-Site) or only sends its Origin,
// a body that is not JSON is refused, and a page whose name was pointed at 127.0.0.1 (DNS
// rebinding) is refused on every route by its Host. The collector's own page and same-origin or
// non-browser clients are served as before, and nothing refused reaches Kafka.
func TestBrowserChecks(t *testing.T) {
	api, _ := collector(t)
	self := strings.TrimPrefix(api, "http://")
	port := self[strings.LastIndex(self, ":")+1:]
	item := fmt.Sprintf("browser-%d", time.Now().UnixNano())
	refused := `{"type":"view","item_id":"` + item + `","viewer_id":"refused"}`
	evil := map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
		wantIn                   string
	}{
		{"cross-site form post", "POST", "/v1/events", refused, with(evil, "Content-Type", "text/plain"), 403, "cross-origin"},
		{"cross-site JSON post", "POST", "/v1/events", refused, with(evil, "Content-Type", "application/json"), 403, "cross-origin"},
		{"same-site post from another port", "POST", "/v1/events", refused,
			map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, 403, "cross-origin"},
		{"another site's Origin without Sec-Fetch-Site", "POST", "/v1/events", refused, map[string]string{"Origin": "http://evil.example"}, 403, "cross-origin"},
		{"cross-site like", "PUT", "/v1/items/" + item + "/likes/u1", "", evil, 403, "cross-origin"},
		{"text/plain without Origin", "POST", "/v1/events", refused, map[string]string{"Content-Type": "text/plain"}, 415, `"field":"Content-Type"`},
		{"form without Origin", "POST", "/v1/events", refused, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/x-ndjson"},
		{"rebound name posting", "POST", "/v1/events", refused, map[string]string{"Host": "evil.example:" + port}, 403, `"field":"Host"`},
		{"rebound name reading", "GET", "/v1/counts?ids=" + item, "", map[string]string{"Host": "evil.example:" + port}, 403, `"field":"Host"`},
		{"rebound name on the page", "GET", "/", "", map[string]string{"Host": "evil.example:" + port, "Sec-Fetch-Site": "same-origin"}, 403, `"field":"Host"`},
		{"rebound name on metrics", "GET", "/metrics", "", map[string]string{"Host": "evil.example"}, 403, `"field":"Host"`},
		{"the page", "GET", "/", "", map[string]string{"Sec-Fetch-Site": "same-origin"}, 200, "<html"},
		{"the page opened from a link on another site", "GET", "/", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 200, "<html"},
		{"same-origin JSON post", "POST", "/v1/events", `{"type":"view","item_id":"` + item + `","viewer_id":"same-origin"}`,
			map[string]string{"Origin": api, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json; charset=utf-8"}, 202, `"accepted":1`},
		{"same-origin by the name localhost", "POST", "/v1/events", `{"type":"view","item_id":"` + item + `","viewer_id":"localhost"}`,
			map[string]string{"Host": "localhost:" + port, "Origin": "http://localhost:" + port, "Content-Type": "application/x-ndjson"}, 202, `"accepted":1`},
		{"a client that is no browser", "POST", "/v1/events", `{"type":"view","item_id":"` + item + `","viewer_id":"client"}`, nil, 202, `"accepted":1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, tt.method, api+tt.path, tt.body, tt.header)
			if code != tt.want || !strings.Contains(body, tt.wantIn) {
				t.Errorf("got %d %.300s; want %d containing %q", code, body, tt.want, tt.wantIn)
			}
		})
	}
	// Every view of item is keyed by it, so it lands in one partition in the order posted: the
	// refused ones, had any been produced, come before the last accepted one.
	viewers := viewersOf(t, item, "client")
	if got, want := strings.Join(viewers, ","), "same-origin,localhost,client"; got != want {
		t.Errorf("views of %s in Kafka: got viewers %s; want %s (none refused)", item, got, want)
	}
}

// with returns a copy of h with k set to v.
func with(h map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range h {
		out[hk] = hv
	}
	return out
}

// viewersOf reads the views topic from the start until the view of item by last and returns the
// viewers of item's views up to it, in log order.
func viewersOf(t *testing.T, item, last string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{infra.Kafka.Addr()}, "browser-test", infra.Logger, nil),
		kgo.ConsumeTopics(schemas.TopicViews), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var viewers []string
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read views of %s: %v; got viewers %v so far", item, err, viewers)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if done || string(r.Key) != item {
				return
			}
			v, err := schemas.DecodeView(r.Value)
			if err != nil {
				t.Fatalf("decode a view of %s: %v", item, err)
			}
			viewers = append(viewers, v.ViewerID)
			done = v.ViewerID == last
		})
		if done {
			return viewers
		}
	}
}
