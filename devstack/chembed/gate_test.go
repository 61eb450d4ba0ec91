package chembed

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGateServesPipelineFirst queues outside and pipeline callers behind a
// held gate: on release every pipeline read goes first, then every pipeline
// write, then the outside callers, each kind in arrival order, and a caller
// that gives up leaves the queue.
func TestGateServesPipelineFirst(t *testing.T) {
	var g gate
	if err := g.acquire(context.Background(), outsideLast); err != nil {
		t.Fatalf("acquire a free gate: %v", err)
	}
	order := make(chan string, 8)
	enqueue := func(name string, p priority) {
		before := queued(&g, p)
		go func() {
			if err := g.acquire(context.Background(), p); err != nil {
				order <- name + " failed"
				return
			}
			order <- name
			g.release()
		}()
		waitQueued(t, &g, p, before, name)
	}
	enqueue("outside 1", outsideLast)
	enqueue("pipeline 1", pipelineWrite)
	enqueue("outside 2", outsideLast)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	before := queued(&g, pipelineWrite)
	go func() { gaveUp <- g.acquire(ctx, pipelineWrite) }()
	waitQueued(t, &g, pipelineWrite, before, "pipeline giving up")
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatalf("cancelled acquire: got nil; want the context's error")
	}
	enqueue("pipeline 2", pipelineWrite)
	enqueue("read 1", pipelineRead)
	enqueue("read 2", pipelineRead)
	g.release()
	want := []string{"read 1", "read 2", "pipeline 1", "pipeline 2", "outside 1", "outside 2"}
	for i, w := range want {
		select {
		case got := <-order:
			if got != w {
				t.Fatalf("turn %d: got %q; want %q", i, got, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("turn %d: nobody got the gate; want %q", i, w)
		}
	}
	if err := g.acquire(context.Background(), outsideLast); err != nil {
		t.Fatalf("acquire after everyone left: %v", err)
	}
	g.release()
}

// TestPipelinePriority: the pipeline's queries go before its writes; a
// write that reads (INSERT ... SELECT) is a write.
func TestPipelinePriority(t *testing.T) {
	for _, tt := range []struct {
		sql  string
		want priority
	}{
		{"SELECT 1", pipelineRead},
		{"WITH x AS (SELECT 1) SELECT * FROM x", pipelineRead},
		{"(SELECT 1) UNION ALL (SELECT 2)", pipelineRead},
		{"SHOW TABLES", pipelineRead},
		{"INSERT INTO t SELECT * FROM u", pipelineWrite},
		{"INSERT INTO t FORMAT RowBinary\n", pipelineWrite},
		{"ALTER TABLE t DELETE WHERE 1", pipelineWrite},
		{"CREATE TABLE t (x UInt8) ENGINE = Memory", pipelineWrite},
	} {
		t.Run(tt.sql, func(t *testing.T) {
			if got := pipelinePriority(scanStatement(tt.sql).kind); got != tt.want {
				t.Fatalf("got priority %d; want %d", got, tt.want)
			}
		})
	}
}

func queued(g *gate, p priority) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting[p])
}

func waitQueued(t *testing.T, g *gate, p priority, before int, name string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if queued(g, p) > before {
			return
		}
	}
	t.Fatalf("%s never queued", name)
}

// TestOutsideWaitsForAQuietPipeline: a run of pipeline calls, each sent
// soon after the one before it returns (a flush's statements), is not cut
// by an outside caller; the outside caller gets the engine once the
// pipeline has been idle for pipelineQuiet.
func TestOutsideWaitsForAQuietPipeline(t *testing.T) {
	var g gate
	if err := g.acquire(context.Background(), pipelineWrite); err != nil {
		t.Fatal(err)
	}
	got := queueOutside(t, &g)
	const statements = 5
	for i := range statements {
		g.release()
		time.Sleep(pipelineQuiet / 4)
		select {
		case at := <-got:
			t.Fatalf("outside caller got the engine at statement %d (%v); want it after the run", i, at)
		default:
		}
		if err := g.acquire(context.Background(), pipelineWrite); err != nil {
			t.Fatal(err)
		}
	}
	g.release()
	done := time.Now()
	select {
	case at := <-got:
		if wait := at.Sub(done); wait < pipelineQuiet*9/10 {
			t.Fatalf("outside caller got the engine %s after the run; want at least %s", wait, pipelineQuiet)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("outside caller never got the engine")
	}
}

// TestBusyCallersLetAWaitingOneIn: callers that never leave the engine free
// still let a caller of a lower place in line in once it has waited its
// bound: a pipeline that never pauses for pipelineQuiet an outside caller
// after outsideEvery; reads back to back (two readers, one always waiting)
// a write after writeEvery.
func TestBusyCallersLetAWaitingOneIn(t *testing.T) {
	tests := []struct {
		name    string
		busy    priority
		callers int
		pause   time.Duration // between a busy caller's calls
		waiter  priority
		every   time.Duration
	}{
		{"outside behind a busy pipeline", pipelineWrite, 1, pipelineQuiet / 10, outsideLast, outsideEvery},
		{"write behind reads back to back", pipelineRead, 2, 0, pipelineWrite, writeEvery},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g gate
			ctx, cancel := context.WithTimeout(context.Background(), 3*tt.every)
			defer cancel()
			stop := make(chan struct{})
			var busy sync.WaitGroup
			for range tt.callers {
				busy.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if g.acquire(ctx, tt.busy) != nil {
							return
						}
						time.Sleep(5 * time.Millisecond)
						g.release()
						time.Sleep(tt.pause)
					}
				})
			}
			defer busy.Wait()
			defer close(stop)
			time.Sleep(50 * time.Millisecond)
			t0 := time.Now()
			if err := g.acquire(ctx, tt.waiter); err != nil {
				t.Fatalf("got %v after %s; want the engine within about %s", err, time.Since(t0), tt.every)
			}
			waited := time.Since(t0)
			g.release()
			if waited < tt.every*9/10 || waited > tt.every+time.Second {
				t.Fatalf("got the engine after %s; want about %s", waited, tt.every)
			}
		})
	}
}

// TestOutsideWaitsForAStalledPipelineToCatchUp: after an outside query made
// a pipeline call wait, the next outside caller waits for the pipeline to
// have been idle for catchUpQuiet, not pipelineQuiet; once an outside query
// has run since, pipelineQuiet again.
func TestOutsideWaitsForAStalledPipelineToCatchUp(t *testing.T) {
	var g gate
	ctx := context.Background()
	if err := g.acquire(ctx, outsideLast); err != nil {
		t.Fatal(err)
	}
	stalled := make(chan struct{})
	go func() {
		defer close(stalled)
		if err := g.acquire(ctx, pipelineWrite); err != nil {
			t.Error(err)
			return
		}
		g.release()
	}()
	waitQueued(t, &g, pipelineWrite, 0, "pipeline")
	next := queueOutside(t, &g)
	g.release()
	<-stalled
	checkOutsideWait(t, &g, next, catchUpQuiet)

	// That outside query stalled nothing: a later run of the pipeline is
	// followed by the usual quiet time.
	if err := g.acquire(ctx, pipelineWrite); err != nil {
		t.Fatal(err)
	}
	next = queueOutside(t, &g)
	g.release()
	checkOutsideWait(t, &g, next, pipelineQuiet)
}

// queueOutside queues an outside caller that releases the engine at once;
// the channel gives the time it got it, once it has given it back (a
// pipeline call the test makes next must not wait behind it: that would be
// a stall, and the gate would then ask for catchUpQuiet).
func queueOutside(t *testing.T, g *gate) <-chan time.Time {
	t.Helper()
	got := make(chan time.Time, 1)
	go func() {
		if err := g.acquire(context.Background(), outsideLast); err != nil {
			t.Error(err)
		}
		at := time.Now()
		g.release()
		got <- at
	}()
	waitQueued(t, g, outsideLast, 0, "outside")
	return got
}

// checkOutsideWait checks that the outside caller got the engine about
// quiet after the pipeline's last call.
func checkOutsideWait(t *testing.T, g *gate, got <-chan time.Time, quiet time.Duration) {
	t.Helper()
	select {
	case at := <-got:
		g.mu.Lock()
		wait := at.Sub(g.lastPipeline)
		g.mu.Unlock()
		if wait < quiet*9/10 || wait > quiet+(catchUpQuiet-pipelineQuiet)/2 {
			t.Fatalf("outside caller got the engine %s after the pipeline's last call; want about %s", wait, quiet)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("outside caller never got the engine")
	}
}

// TestOutsideQueriesStayLast: however an outside caller words its query or
// sends it, it waits in the outside line; only the pipeline's own queries
// are moved ahead of its writes.
func TestOutsideQueriesStayLast(t *testing.T) {
	g := &shared.eng.gate
	t.Cleanup(func() { rawQuery(shared, "DROP DATABASE IF EXISTS gate_order") })
	for _, tt := range []struct {
		name, user, pass, method, sql string
		want                          priority
	}{
		{"dashboards GET", dashUser, dashPassword, http.MethodGet, "SELECT 1", outsideLast},
		{"dashboards POST", dashUser, dashPassword, http.MethodPost, "SELECT 1", outsideLast},
		{"dashboards WITH", dashUser, dashPassword, http.MethodPost, "WITH 1 AS x SELECT x", outsideLast},
		{"dashboards SHOW", dashUser, dashPassword, http.MethodPost, "SHOW DATABASES", outsideLast},
		{"pipeline GET", "default", pipePassword, http.MethodGet, "SELECT 1", pipelineRead},
		{"pipeline POST", "default", pipePassword, http.MethodPost, "SELECT 1", pipelineRead},
		{"pipeline write", "default", pipePassword, http.MethodPost, "CREATE DATABASE IF NOT EXISTS gate_order", pipelineWrite},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, body := "http://"+shared.Addr()+"/?"+url.Values{"query": {tt.sql}}.Encode(), ""
			if tt.method == http.MethodPost {
				u, body = "http://"+shared.Addr()+"/", tt.sql
			}
			req, err := http.NewRequest(tt.method, u, strings.NewReader(body))
			if err != nil {
				t.Fatalf("new request: %v", err)
			}
			req.SetBasicAuth(tt.user, tt.pass)
			if err := g.acquire(context.Background(), pipelineWrite); err != nil {
				t.Fatalf("hold the engine: %v", err)
			}
			held := true
			defer func() {
				if held {
					g.release()
				}
			}()
			before := queued(g, tt.want)
			done := make(chan string, 1)
			go func() {
				resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
				if err != nil {
					done <- err.Error()
					return
				}
				_ = resp.Body.Close()
				done <- resp.Status
			}()
			waitQueued(t, g, tt.want, before, tt.name)
			held = false
			g.release()
			if got := <-done; got != "200 OK" {
				t.Fatalf("answer: got %q; want 200 OK", got)
			}
		})
	}
}
