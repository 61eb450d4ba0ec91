package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestRunOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	boom := errors.New("boom")
	tests := []struct {
		name      string
		failStart string // part whose Start fails
		failAfter bool   // a part calls Fail once running
		wantLog   string
		wantErr   error
	}{
		{"clean", "", false, "start a,start b,start c,stop c,stop b,stop a", nil},
		{"start failure stops started parts", "c", false, "start a,start b,start c,stop b,stop a", boom},
		{"failure while running", "", true, "start a,start b,start c,stop c,stop b,stop a", boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log []string
			r := NewRunner(slog.New(slog.NewTextHandler(io.Discard, nil)))
			part := func(name string) Part {
				return Part{
					Name: name,
					Start: func(context.Context) error {
						log = append(log, "start "+name)
						if name == tt.failStart {
							return boom
						}
						return nil
					},
					Stop: func(context.Context) error { log = append(log, "stop "+name); return nil },
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			parts := []Part{part("a"), part("b"), part("c")}
			parts = append(parts, Part{Name: "trigger", Start: func(context.Context) error {
				if !r.Ready() {
					go func() {
						time.Sleep(10 * time.Millisecond)
						if tt.failAfter {
							r.Fail(boom)
						} else {
							cancel()
						}
					}()
				}
				return nil
			}})
			err := r.Run(ctx, time.Second, parts...)
			if got := strings.Join(log, ","); got != tt.wantLog {
				t.Errorf("got %s; want %s", got, tt.wantLog)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("got error %v; want %v", err, tt.wantErr)
			}
			if r.Ready() {
				t.Error("got ready after Run returned; want not ready")
			}
		})
	}
}

func TestAdminRoutes(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := NewRunner(slog.New(slog.NewTextHandler(io.Discard, nil)))
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_test_total", Help: "x"})
	reg.MustRegister(c)
	var servers []Part
	defer func() {
		for _, srv := range servers {
			srv.Stop(context.Background())
		}
	}()
	serve := func(pprof bool) func() string {
		mux := http.NewServeMux()
		AdminRoutes(mux, r, reg, AdminOptions{Pprof: pprof})
		srv, addr := HTTPServer("admin", "127.0.0.1:0", mux)
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, srv)
		return addr
	}
	plain, withPprof := serve(false), serve(true)
	get := func(addr func() string, path string) (int, string) {
		resp, err := http.Get("http://" + addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		addr     func() string
		path     string
		wantCode int
		wantBody string
	}{
		{plain, "/healthz", 200, "ok"},
		{plain, "/readyz", 503, "not ready"},
		{plain, "/metrics", 200, "tally_test_total 0"},
		{plain, "/debug/pprof/", 404, ""},
		{withPprof, "/debug/pprof/", 200, "goroutine"},
		{withPprof, "/debug/pprof/goroutine?debug=1", 200, "goroutine profile"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, body := get(tt.addr, tt.path)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %q; want %d containing %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestStopIsBoundedByTheTimeout: a part whose Stop never returns is left behind when the
// shutdown timeout runs out, the parts before it still get their Stop (with an ended context),
// and Run returns within the bound, saying which part it left.
func TestStopIsBoundedByTheTimeout(t *testing.T) {
	release := make(chan struct{})
	defer goleak.VerifyNone(t)
	defer close(release)
	stopped := make(chan string, 3)
	part := func(name string, stop func(context.Context) error) Part {
		return Part{Name: name, Start: func(context.Context) error { return nil }, Stop: func(ctx context.Context) error {
			err := stop(ctx)
			stopped <- name
			return err
		}}
	}
	quick := func(context.Context) error { return nil }
	stuck := func(context.Context) error { <-release; return nil }
	r := NewRunner(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const timeout = 300 * time.Millisecond
	t0 := time.Now()
	err := r.Run(ctx, timeout, part("first", quick), part("stuck", stuck), part("last", quick))
	if took := time.Since(t0); took > timeout+time.Second {
		t.Fatalf("Run returned after %s; want within the %s timeout", took, timeout)
	}
	if err == nil || !strings.Contains(err.Error(), "stop stuck") || !strings.Contains(err.Error(), "left behind") {
		t.Fatalf("got %v; want an error saying part stuck was left behind", err)
	}
	for _, want := range []string{"last", "first"} {
		if got := <-stopped; got != want {
			t.Fatalf("got %s stopped; want %s", got, want)
		}
	}
}
