package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/schemas"
)

// serveLoopback serves h on a loopback port through the lifecycle HTTP server with lim and
// returns its address.
func serveLoopback(t *testing.T, h *Handler, lim lifecycle.HTTPLimits) string {
	t.Helper()
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	part, addr := lifecycle.HTTPServerWithLimits("ingest test", "127.0.0.1:0", mux, lim)
	if err := part.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = part.Stop(ctx)
	})
	return addr()
}

// stalledPost opens a connection that posts bodyLen bytes of body minus the last one and then
// stalls, as a slow or hostile client does. The write runs in the background; done closes when
// it has ended (all written, or the server closed the connection).
func stalledPost(t *testing.T, addr string, body []byte) (conn net.Conn, done chan struct{}) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	done = make(chan struct{})
	go func() {
		defer close(done)
		fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n", len(body))
		_, _ = conn.Write(body[:len(body)-1])
	}()
	return conn, done
}

// TestConcurrentBodiesBound posts, like the attack, many 3.9 MB bodies that stall one
// byte short of the end: only MaxConcurrentBodies of them are read, every other one gets a JSON
// 503 with Retry-After at once, and the memory they hold stays under the bound's worth.
func TestConcurrentBodiesBound(t *testing.T) {
	const bound, extra = 3, 20
	h, _ := newHandler(t, []string{"127.0.0.1:1"}, 1000, time.Second)
	h.cfg.MaxBodyBytes = 4 << 20
	h.slots = make(chan struct{}, bound)
	addr := serveLoopback(t, h, lifecycle.HTTPLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute})
	line := `{"type":"view","item_id":"a","viewer_id":"v"}` + "\n"
	body := bytes.Repeat([]byte(line), 3900000/len(line))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var holders []net.Conn
	for range bound {
		c, _ := stalledPost(t, addr, body)
		holders = append(holders, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(h.slots) < bound {
		if time.Now().After(deadline) {
			t.Errorf("got %d requests in flight after 10s; want %d", len(h.slots), bound)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i := range extra {
		conn, written := stalledPost(t, addr, body)
		wg.Go(func() {
			defer func() { conn.Close(); <-written }()
			t0 := time.Now()
			_ = conn.SetReadDeadline(t0.Add(3 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			var got string
			switch {
			case err != nil:
				got = fmt.Sprintf("no answer after %s (%v)", time.Since(t0).Round(time.Millisecond), err)
			default:
				var e struct{ Error string }
				derr := json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
				if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || derr != nil || !strings.Contains(e.Error, "over capacity") {
					got = fmt.Sprintf("%d (Retry-After %q) %q %v", resp.StatusCode, resp.Header.Get("Retry-After"), e.Error, derr)
				}
			}
			if got != "" {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("request %d beyond the bound: got %s; want 503 with Retry-After and a JSON error within 3s", i+1, got))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}

	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	// Each read body may hold up to twice its size while io.ReadAll grows it.
	limit := uint64(bound*2*len(body) + 16<<20)
	grew := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d MB with %d stalled 3.9 MB bodies, %d of them read", grew>>20, bound+extra, bound)
	if grew > int64(limit) {
		t.Errorf("heap grew by %d MB with %d stalled bodies; want at most %d MB (%d bodies read at once)", grew>>20, bound+extra, limit>>20, bound)
	}

	// A stalled client that goes away gives its slot back.
	for _, c := range holders {
		c.Close()
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(h.slots) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("got %d requests in flight 10s after their clients left; want 0", len(h.slots))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A body trickling in past the read timeout is answered 408 (JSON, naming no address) and its
// slot is given back.
func TestSlowBodyGets408(t *testing.T) {
	h, _ := newHandler(t, []string{"127.0.0.1:1"}, 1000, time.Second)
	addr := serveLoopback(t, h, lifecycle.HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/views HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("got %v; want a 408 answer within 5s", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct{ Error, Field string }
	if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(b, &e) != nil || e.Field != "body" || strings.Contains(string(b), "127.0.0.1") {
		t.Errorf("got %d %s; want 408 with a JSON error on body naming no address", resp.StatusCode, b)
	}
	if len(h.slots) != 0 {
		t.Errorf("got %d requests in flight after the answer; want 0", len(h.slots))
	}
}

// parseBatch parses an NDJSON body of POST /v1/events as a handler without click keys does.
func parseBatch(body []byte, maxLines int, now time.Time, bounds schemas.TimeBounds, rb *recordBuilder) ([]*kgo.Record, []Rejection, error) {
	h := &Handler{cfg: Config{MaxLines: maxLines, Bounds: bounds}}
	b, err := h.parseEvents(body, now, rb)
	return b.recs, b.rejected, err
}

// The records parseBatch returns decode back to valid views of the good lines.
func TestParseBatch(t *testing.T) {
	now := time.Now()
	bounds := schemas.TimeBounds{Future: time.Minute, Late: time.Hour}
	tests := []struct {
		name         string
		body         string
		maxLines     int
		wantItems    []string
		wantRejected []int
		wantErr      bool
	}{
		{"two good", "{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\"}\n{\"type\":\"view\",\"item_id\":\"b\",\"viewer_id\":\"v\"}", 10, []string{"a", "b"}, nil, false},
		{"crlf and blanks", "\r\n{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\"}\r\n  \n{\"type\":\"view\",\"item_id\":\"b\",\"viewer_id\":\"v\"}\r\n", 10, []string{"a", "b"}, nil, false},
		{"bad line numbered as sent", "\n\n{\"type\":\"view\"}\n{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\"}", 10, []string{"a"}, []int{3}, false},
		{"blank lines beyond max are fine", "{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\"}\n\n\n\n", 1, []string{"a"}, nil, false},
		{"event beyond max", "{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\"}\n{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\"}", 1, nil, nil, true},
		{"empty", "", 10, nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, rejected, err := parseBatch([]byte(tt.body), tt.maxLines, now, bounds, newRecordBuilder(schemas.Encoding{}, 0, 0))
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v; want error %v", err, tt.wantErr)
			}
			var items []string
			for _, r := range recs {
				v, err := schemas.DecodeView(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				items = append(items, v.ItemID)
			}
			var lines []int
			for _, r := range rejected {
				lines = append(lines, r.Line)
			}
			if fmt.Sprint(items) != fmt.Sprint(tt.wantItems) || fmt.Sprint(lines) != fmt.Sprint(tt.wantRejected) {
				t.Errorf("got items %v rejected lines %v; want %v and %v", items, lines, tt.wantItems, tt.wantRejected)
			}
		})
	}
}

// FuzzLines checks the NDJSON splitting: line numbers rise, each line is trimmed, non-empty and
// holds no newline, and the lines are exactly the non-blank "\n"-separated pieces of the body.
func FuzzLines(f *testing.F) {
	for _, s := range []string{"", "\n", "a", "a\n", "a\nb", "\n\na\n\n", "a\r\nb\r\n", " \t\n x \n", "\r", "a\x00\nb", "é\n\u2028\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want [][]byte
		pieces := bytes.Split(body, []byte{'\n'})
		if len(body) > 0 && body[len(body)-1] == '\n' {
			pieces = pieces[:len(pieces)-1]
		}
		var wantNums []int
		for i, p := range pieces {
			if p = bytes.TrimSpace(p); len(p) > 0 {
				want = append(want, p)
				wantNums = append(wantNums, i+1)
			}
		}
		var got [][]byte
		var nums []int
		for n, line := range lines(body) {
			if len(line) == 0 || bytes.IndexByte(line, '\n') >= 0 || !bytes.Equal(line, bytes.TrimSpace(line)) {
				t.Fatalf("line %d is %q; want trimmed, non-empty, without a newline", n, line)
			}
			got = append(got, line)
			nums = append(nums, n)
		}
		if fmt.Sprintf("%q %v", got, nums) != fmt.Sprintf("%q %v", want, wantNums) {
			t.Fatalf("got lines %q numbered %v; want %q numbered %v", got, nums, want, wantNums)
		}
		// Stopping early must stop the iteration.
		for range lines(body) {
			break
		}
	})
}

// FuzzParseBatch feeds arbitrary bodies through the whole NDJSON parse: it never panics, every
// non-blank line is either a record or a rejection numbered within the body, and every record
// decodes to a valid view.
func FuzzParseBatch(f *testing.F) {
	for _, s := range []string{
		"",
		`{"type":"view","item_id":"a","viewer_id":"v"}`,
		"{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\",\"ts\":\"2026-11-30T10:00:00Z\"}\n{\"type\":\"like\"}\n",
		"{\n}\n[1,2]\nnull\n\"x\"\n",
		"{\"type\":\"view\",\"item_id\":\"a\",\"viewer_id\":\"v\",\"event_id\":\"e\",\"ts\":1}\r\n\r\n",
		`{"type":"view","item_id":"a","viewer_id":"v","extra":1}`,
	} {
		f.Add([]byte(s), uint8(3))
	}
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	bounds := schemas.TimeBounds{Future: 5 * time.Minute, Late: 24 * time.Hour}
	f.Fuzz(func(t *testing.T, body []byte, maxLines uint8) {
		max := int(maxLines%8) + 1
		recs, rejected, err := parseBatch(body, max, now, bounds, newRecordBuilder(schemas.Encoding{}, 0, 0))
		nonBlank, last := 0, 0
		for n := range lines(body) {
			nonBlank++
			last = n
		}
		if err != nil {
			if last <= max {
				t.Fatalf("got %v with the last event on line %d of at most %d; want no error", err, last, max)
			}
			return
		}
		if last > max {
			t.Fatalf("got no error with an event on line %d; want one beyond %d lines", last, max)
		}
		if len(recs)+len(rejected) != nonBlank {
			t.Fatalf("got %d records and %d rejections for %d non-blank lines; want them to add up", len(recs), len(rejected), nonBlank)
		}
		prev := 0
		for _, r := range rejected {
			if r.Line <= prev || r.Line > last || r.Error == "" {
				t.Fatalf("got rejection %+v after line %d; want rising line numbers up to %d, with an error", r, prev, last)
			}
			prev = r.Line
		}
		for _, r := range recs {
			if r.Topic == schemas.TopicClicks {
				c, err := schemas.DecodeClick(r.Value)
				if err != nil || string(r.Key) != c.AdID {
					t.Fatalf("record %q/%q does not decode to a click keyed by its ad: %v", r.Key, r.Value, err)
				}
				continue
			}
			v, err := schemas.DecodeView(r.Value)
			if err != nil || string(r.Key) != v.ItemID || r.Topic != schemas.TopicViews {
				t.Fatalf("record %q/%q does not decode to a view keyed by its item: %v", r.Key, r.Value, err)
			}
			if err := schemas.CheckID("item_id", v.ItemID, true); err != nil {
				t.Fatalf("accepted a view with a bad item id: %v", err)
			}
		}
	})
}

// Bodies are read into reused buffers sized from Content-Length, so a client lies about it: a
// length over the bound, a chunked body over it, a length longer than what it sends, one
// shorter with more bytes after it, and 1 GB claimed. None is answered 2xx (413, 408, 400, or
// 503 for the good line a short length cuts out, Kafka being down here), and after each a
// request is answered from its own body alone (its rejections name its own lines and fields),
// so nothing of the earlier bodies is read again.
func TestBodyLengthsThatLie(t *testing.T) {
	h, _ := newHandler(t, []string{"127.0.0.1:1"}, 1000, time.Second)
	h.cfg.MaxBodyBytes = 64 << 10
	addr := serveLoopback(t, h, lifecycle.HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	line := `{"type":"view","item_id":"a","viewer_id":"v"}` + "\n"
	big := strings.Repeat(line, (80<<10)/len(line))
	small := strings.Repeat(line, 3)
	head := "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
	tests := []struct{ name, req string }{
		{"length over the bound", head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big)) + big},
		{"chunked over the bound", head + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)},
		{"length longer than the body", head + "Content-Length: 4000\r\n\r\n" + small},
		{"length shorter than the body", head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(small)/2) + small},
		{"a gigabyte claimed", head + "Content-Length: 1000000000\r\n\r\n" + small},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, tt.req)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					t.Errorf("got %d; want a refusal", resp.StatusCode)
				}
			}
			// The next body (its lines bad on item_id, then viewer_id), on its own connection.
			next := `{"type":"view","item_id":"","viewer_id":"v"}` + "\n" + `{"type":"view","item_id":"b","viewer_id":""}` + "\n"
			w := serve(h, "POST", "/v1/events", next)
			var answer batchResponse
			if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || w.Code != 400 || len(answer.Rejected) != 2 ||
				answer.Rejected[0].Field != "item_id" || answer.Rejected[1].Line != 2 || answer.Rejected[1].Field != "viewer_id" {
				t.Errorf("next request: got %d %s; want 400 with its own lines 1 and 2 rejected on item_id and viewer_id", w.Code, w.Body)
			}
		})
	}
}
