package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// /readyz names every registered check with its status and error, and answers 503 while a
// required one is down, while starting and while stopping; a degrading check down leaves it
// ready, degraded.
func TestReadyzReportsEachCheck(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := NewRunner(slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	AdminRoutes(mux, r, prometheus.NewRegistry(), AdminOptions{})
	srv, addr := HTTPServer("admin", "127.0.0.1:0", mux)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	defer http.DefaultClient.CloseIdleConnections()

	var redisDown, clickhouseDown atomic.Bool
	r.AddCheck("kafka", func(context.Context) error { return nil })
	r.AddCheck("redis", func(context.Context) error {
		if redisDown.Load() {
			return errors.New("dial tcp 127.0.0.1:6379: connection refused")
		}
		return nil
	})
	r.AddDegradingCheck("clickhouse", func(ctx context.Context) error {
		if clickhouseDown.Load() {
			return errors.New("connection refused")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		running <- r.Run(ctx, time.Second, Part{Name: "p", Start: func(context.Context) error { return nil }},
			Part{Name: "signal", Start: func(context.Context) error { close(started); return nil }})
	}()
	<-started
	for !r.Ready() {
		time.Sleep(time.Millisecond)
	}

	type body struct {
		Status string
		Checks []CheckResult
	}
	get := func() (int, body) {
		t.Helper()
		resp, err := http.Get("http://" + addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b body
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
			t.Fatalf("decode /readyz: %v", err)
		}
		return resp.StatusCode, b
	}
	tests := []struct {
		name                      string
		redisDown, clickhouseDown bool
		stop                      bool
		wantCode                  int
		wantStatus                string
		wantRedis                 CheckResult
	}{
		{"all up", false, false, false, 200, "ready", CheckResult{Name: "redis", Status: "up", Required: true}},
		{"redis down", true, false, false, 503, "not ready", CheckResult{Name: "redis", Status: "down", Required: true, Error: "dial tcp 127.0.0.1:6379: connection refused"}},
		{"redis back", false, false, false, 200, "ready", CheckResult{Name: "redis", Status: "up", Required: true}},
		{"clickhouse down", false, true, false, 200, "degraded", CheckResult{Name: "redis", Status: "up", Required: true}},
		{"both down", true, true, false, 503, "not ready", CheckResult{Name: "redis", Status: "down", Required: true, Error: "dial tcp 127.0.0.1:6379: connection refused"}},
		{"stopping", false, false, true, 503, "not ready", CheckResult{Name: "redis", Status: "up", Required: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			redisDown.Store(tt.redisDown)
			clickhouseDown.Store(tt.clickhouseDown)
			if tt.stop {
				cancel()
				if err := <-running; err != nil {
					t.Fatal(err)
				}
			}
			code, b := get()
			if code != tt.wantCode || b.Status != tt.wantStatus {
				t.Errorf("got %d %q; want %d %q", code, b.Status, tt.wantCode, tt.wantStatus)
			}
			wantCH := CheckResult{Name: "clickhouse", Status: "up"}
			if tt.clickhouseDown {
				wantCH.Status, wantCH.Error = "down", "connection refused"
			}
			if len(b.Checks) != 3 || b.Checks[0].Name != "kafka" || b.Checks[1] != tt.wantRedis || b.Checks[2] != wantCH {
				t.Errorf("got checks %+v; want kafka, %+v, %+v", b.Checks, tt.wantRedis, wantCH)
			}
		})
	}
}

// A check that does not answer reads as down within CheckTimeout.
func TestReadinessCheckTimesOut(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := NewRunner(slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.AddCheck("hangs", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ok, res := r.Readiness(ctx)
	if ok || len(res) != 1 || res[0].Status != "down" {
		t.Errorf("got %v %+v; want not ready, hangs down", ok, res)
	}
}
