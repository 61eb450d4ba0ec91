package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// script is an HTTP server answering each request with the next scripted status, recording the
// bodies it got. It stands in for the collector only to test the client's retry policy (pure
// logic); TestAllInOne in the e2e module drives the real collector with this client.
type script struct {
	mu      sync.Mutex
	answers []answer
	bodies  []string
	headers []http.Header
	urls    []string
}

type answer struct {
	status     int
	retryAfter string
	body       string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	s.headers = append(s.headers, r.Header.Clone())
	s.urls = append(s.urls, r.URL.RequestURI())
	a := answer{status: http.StatusInternalServerError, body: `{"error":"script exhausted"}`}
	if len(s.answers) > 0 {
		a, s.answers = s.answers[0], s.answers[1:]
	}
	s.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func newScripted(t *testing.T, opts Options, answers ...answer) (*Client, *script) {
	t.Helper()
	s := &script{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	opts.BaseURL = srv.URL
	if opts.RetryBase == 0 {
		opts.RetryBase = time.Millisecond
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

const accepted1 = `{"accepted":1,"rejected":[]}`

func TestRetries(t *testing.T) {
	busy := answer{status: 503, retryAfter: "0", body: `{"error":"ingest is over capacity"}`}
	tests := []struct {
		name       string
		answers    []answer
		attempts   int
		wantTries  int
		wantStatus int // 0: success
	}{
		{"success at once", []answer{{202, "", accepted1}}, 5, 1, 0},
		{"503 then success", []answer{busy, busy, {202, "", accepted1}}, 5, 3, 0},
		{"429 then success", []answer{{429, "0", `{"error":"rate"}`}, {202, "", accepted1}}, 5, 2, 0},
		{"503 until attempts run out", []answer{busy, busy, busy}, 3, 3, 503},
		{"400 is not retried", []answer{{400, "", `{"error":"is required","field":"item_id"}`}, {202, "", accepted1}}, 5, 1, 400},
		{"413 is not retried", []answer{{413, "", `{"error":"too big"}`}, {202, "", accepted1}}, 5, 1, 413},
		{"no retry with one attempt", []answer{busy, {202, "", accepted1}}, 1, 1, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := newScripted(t, Options{MaxAttempts: tt.attempts}, tt.answers...)
			err := c.SendView(context.Background(), View{ItemID: "i", ViewerID: "v"})
			if got := len(s.bodies); got != tt.wantTries {
				t.Errorf("tries: got %d; want %d", got, tt.wantTries)
			}
			switch {
			case tt.wantStatus == 0 && err != nil:
				t.Errorf("got error %v; want success", err)
			case tt.wantStatus != 0 && !IsStatus(err, tt.wantStatus):
				t.Errorf("got error %v; want status %d", err, tt.wantStatus)
			}
			for i, b := range s.bodies {
				if b != s.bodies[0] {
					t.Errorf("attempt %d sent %q; want the first attempt's %q (ids and time fixed before the first try)", i+1, b, s.bodies[0])
				}
			}
		})
	}
}

// When no answer arrives (the attempt times out, or the connection breaks), the call is sent
// again, with the same body: the event's id and time were fixed before the first attempt.
func TestRetriesWhenNoAnswerArrives(t *testing.T) {
	tests := []struct {
		name  string
		fails int // requests answered by fail before the first answer
		fail  func(w http.ResponseWriter, r *http.Request, release <-chan struct{})
	}{
		{"attempt timed out", 1, func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			select { // past the client's 200 ms bound per attempt
			case <-release:
			case <-r.Context().Done():
			}
		}},
		{"connection broken twice", 2, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var bodies []string
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies = append(bodies, string(b))
				n := len(bodies)
				mu.Unlock()
				if n <= tt.fails {
					tt.fail(w, r, release)
					return
				}
				w.WriteHeader(202)
				io.WriteString(w, accepted1)
			}))
			defer srv.Close()
			defer close(release)
			c, err := New(Options{BaseURL: srv.URL, HTTPClient: DefaultHTTPClient(200*time.Millisecond, 1), RetryBase: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SendView(context.Background(), View{ItemID: "i", ViewerID: "v"}); err != nil {
				t.Fatalf("got %v; want success once the failures are over", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(bodies) != tt.fails+1 || len(slices.Compact(slices.Clone(bodies))) != 1 {
				t.Errorf("requests: got %q; want %d with the same body", bodies, tt.fails+1)
			}
		})
	}
}

func TestErrorCarriesFieldAndRetryAfter(t *testing.T) {
	c, _ := newScripted(t, Options{MaxAttempts: 1},
		answer{503, "7", `{"error":"kafka did not acknowledge","field":""}`},
		answer{400, "", `{"error":"is 26h0m0s old","field":"ts"}`})
	err := c.SendView(context.Background(), View{ItemID: "i", ViewerID: "v"})
	var ae *APIError
	if !errors.As(err, &ae) || ae.RetryAfter != 7*time.Second || !ae.Temporary() {
		t.Fatalf("got %#v; want a temporary APIError with RetryAfter 7s", err)
	}
	err = c.SendView(context.Background(), View{ItemID: "i", ViewerID: "v"})
	if !errors.As(err, &ae) || ae.Field != "ts" || ae.Temporary() || !strings.Contains(err.Error(), "ts: is 26h0m0s old") {
		t.Fatalf("got %v; want a permanent APIError naming ts", err)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	c, s := newScripted(t, Options{}, answer{503, "1", `{"error":"busy"}`}, answer{202, "", accepted1})
	start := time.Now()
	if err := c.SendView(context.Background(), View{ItemID: "i", ViewerID: "v"}); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < time.Second {
		t.Errorf("retried after %s; want at least the server's Retry-After of 1s", got)
	}
	if len(s.bodies) != 2 {
		t.Errorf("tries: got %d; want 2", len(s.bodies))
	}
}

func TestRetryAfterBeyondDeadlineGivesUp(t *testing.T) {
	c, s := newScripted(t, Options{}, answer{503, "30", `{"error":"busy"}`}, answer{202, "", accepted1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := c.SendView(ctx, View{ItemID: "i", ViewerID: "v"})
	if !IsStatus(err, 503) {
		t.Fatalf("got %v; want the 503", err)
	}
	if d := time.Since(start); d > time.Second || len(s.bodies) != 1 {
		t.Errorf("gave up after %s and %d tries; want at once after 1 (Retry-After beyond the deadline)", d, len(s.bodies))
	}
}

func TestCancelStopsRetrying(t *testing.T) {
	busy := answer{503, "", `{"error":"busy"}`}
	c, _ := newScripted(t, Options{MaxAttempts: 100, RetryBase: 50 * time.Millisecond}, busy, busy, busy, busy, busy, busy)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(120*time.Millisecond, cancel)
	err := c.SendView(ctx, View{ItemID: "i", ViewerID: "v"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v; want context.Canceled", err)
	}
}

func TestEventsRejectionsAndKey(t *testing.T) {
	c, s := newScripted(t, Options{APIKey: "secret"},
		answer{400, "", `{"accepted":0,"rejected":[{"line":1,"field":"item_id","error":"is required"}]}`})
	res, err := c.SendEvents(context.Background(), []Event{View{ViewerID: "v"}})
	if !IsStatus(err, 400) || len(res.Rejected) != 1 || res.Rejected[0].Field != "item_id" {
		t.Fatalf("got %+v, %v; want the 400 with line 1 rejected for item_id", res, err)
	}
	if got := s.headers[0].Get("X-API-Key"); got != "secret" {
		t.Errorf("X-API-Key: got %q; want secret", got)
	}
	if got := s.headers[0].Get("Content-Type"); got != "application/x-ndjson" {
		t.Errorf("Content-Type: got %q; want application/x-ndjson", got)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q): got nil error; want one", u)
		}
	}
}

// lines splits the bodies a script got into their NDJSON lines.
func lines(bodies []string) []string {
	var out []string
	for _, b := range bodies {
		sc := bufio.NewScanner(bytes.NewBufferString(b))
		for sc.Scan() {
			out = append(out, sc.Text())
		}
	}
	return out
}

func TestBatcherBounds(t *testing.T) {
	many := make([]answer, 100)
	for i := range many {
		many[i] = answer{202, "", accepted1}
	}
	tests := []struct {
		name      string
		opts      BatcherOptions
		events    int
		wantBods  int
		waitDelay bool
	}{
		{"by count", BatcherOptions{MaxEvents: 10, MaxDelay: time.Hour}, 35, 4, false},
		{"by bytes", BatcherOptions{MaxBytes: 300, MaxDelay: time.Hour}, 12, 0, false},
		{"by time", BatcherOptions{MaxEvents: 1000, MaxDelay: 50 * time.Millisecond}, 3, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := newScripted(t, Options{}, many...)
			var mu sync.Mutex
			results := 0
			tt.opts.OnResult = func(BatchResult) { mu.Lock(); results++; mu.Unlock() }
			b := c.NewBatcher(tt.opts)
			for i := range tt.events {
				if err := b.Add(context.Background(), View{ItemID: "item", ViewerID: "viewer", EventID: strings.Repeat("e", 10) + string(rune('a'+i%26))}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.waitDelay {
				deadline := time.Now().Add(5 * time.Second)
				for {
					s.mu.Lock()
					n := len(s.bodies)
					s.mu.Unlock()
					if n == 1 || time.Now().After(deadline) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				s.mu.Lock()
				if len(s.bodies) != 1 {
					t.Errorf("bodies before Close: got %d; want 1 sent by MaxDelay", len(s.bodies))
				}
				s.mu.Unlock()
			}
			if err := b.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := len(lines(s.bodies)); got != tt.events {
				t.Errorf("lines sent: got %d; want %d", got, tt.events)
			}
			for i, body := range s.bodies {
				if tt.opts.MaxBytes > 0 && len(body) > tt.opts.MaxBytes {
					t.Errorf("body %d: %d bytes; want at most %d", i, len(body), tt.opts.MaxBytes)
				}
			}
			if tt.wantBods > 0 && len(s.bodies) != tt.wantBods {
				t.Errorf("bodies: got %d; want %d", len(s.bodies), tt.wantBods)
			}
			if st := b.Stats(); st.Events != tt.events || st.Batches != len(s.bodies) || results != len(s.bodies) {
				t.Errorf("stats %+v, results %d; want %d events in %d bodies", st, results, tt.events, len(s.bodies))
			}
			if err := b.Add(context.Background(), View{ItemID: "i", ViewerID: "v"}); !errors.Is(err, ErrClosed) {
				t.Errorf("Add after Close: got %v; want ErrClosed", err)
			}
		})
	}
}
