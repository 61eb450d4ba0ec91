package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// startServer serves h within lim on a loopback port until the test ends and returns its address.
func startServer(t *testing.T, h http.Handler, lim HTTPLimits) string {
	t.Helper()
	part, addr := HTTPServerWithLimits("test http", "127.0.0.1:0", h, lim)
	if err := part.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := part.Stop(ctx); err != nil {
			t.Errorf("stop server: %v", err)
		}
	})
	return addr()
}

// closedWithin reads conn until the server closes it and returns how long that took, or fails
// the test if the connection is still open after max.
func closedWithin(t *testing.T, conn net.Conn, max time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	_ = conn.SetReadDeadline(t0.Add(max))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s; want it closed by the server", max)
	}
	return time.Since(t0)
}

// A body sent a byte at a time is cut off at the read timeout instead of holding its
// connection, and its half-read body, for as long as the client likes.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs after the server's stop
	readErr := make(chan error, 1)
	addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		w.WriteHeader(http.StatusRequestTimeout)
	}), HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	d := closedWithin(t, conn, 5*time.Second)
	close(stop)
	<-trickled
	if d > 2*time.Second {
		t.Errorf("connection closed after %s; want within 2s of a 500ms read timeout", d)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("handler's body read: got %v; want a deadline error", err)
		}
	case <-time.After(time.Second):
		t.Error("handler never saw the body read end")
	}
}

// An idle keep-alive connection is closed after the idle timeout.
func TestIdleKeepAliveIsClosed(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs after the server's stop
	addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		HTTPLimits{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatal("server closed after the first answer; want keep-alive")
	}
	t0 := time.Now()
	_ = conn.SetReadDeadline(t0.Add(5 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("idle connection still open after 5s; want it closed after the 300ms idle timeout")
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("idle connection closed after %s; want within 2s of a 300ms idle timeout", d)
	}
}

// Unknown routes and wrong methods answer the documented JSON error, with Allow on a 405.
func TestFallbackRoutesAnswerJSON(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs after the server's stop
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/views", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("PUT /v1/items/{id}/likes/{user}", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("DELETE /v1/items/{id}/likes/{user}", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {})
	FallbackRoutes(mux)
	addr := startServer(t, mux, DefaultHTTPLimits())
	cl := &http.Client{Transport: &http.Transport{}}
	defer cl.CloseIdleConnections()
	tests := []struct {
		method, path string
		wantCode     int
		wantAllow    string
		wantError    string
	}{
		{"GET", "/nope", 404, "", "no such route: /nope"},
		{"POST", "/", 404, "", "no such route: /"},
		{"GET", "/v1/views", 405, "POST", "method GET is not allowed on /v1/views; allowed: POST"},
		{"POST", "/v1/items/a/likes/u", 405, "DELETE, PUT", "allowed: DELETE, PUT"},
		{"POST", "/healthz", 405, "GET, HEAD", "allowed: GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://"+addr+tt.path, nil)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Error string }
			derr := json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tt.wantCode || derr != nil || !strings.Contains(body.Error, tt.wantError) {
				t.Errorf("got %d %q (decode: %v); want %d with JSON error containing %q", resp.StatusCode, body.Error, derr, tt.wantCode, tt.wantError)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("got Content-Type %q; want application/json", ct)
			}
			if got := resp.Header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("got Allow %q; want %q", got, tt.wantAllow)
			}
		})
	}
}
