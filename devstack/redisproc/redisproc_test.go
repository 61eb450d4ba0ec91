package redisproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestStartServesAndStops(t *testing.T) {
	tests := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"absolute dir", func(t *testing.T) string { return t.TempDir() }},
		{"relative dir", func(t *testing.T) string { t.Chdir(t.TempDir()); return "data/redis" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkServesAndStops(t, tt.dir(t)) })
	}
}

func checkServesAndStops(t *testing.T, dir string) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Start(ctx, Config{Dir: dir, MaxMemory: "64mb", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := niceOf(t, p.Pid()), niceOf(t, os.Getpid()); got != want {
		t.Errorf("niceness: got %d; want the parent's %d", got, want)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); got != "v" || err != nil {
		t.Errorf("got %q, %v; want \"v\", nil", got, err)
	}
	// The bound and the policy: state is never evicted.
	for k, want := range map[string]string{"maxmemory": "67108864", "maxmemory-policy": "noeviction", "hash-max-listpack-entries": hashListpackEntries} {
		if got := rdb.ConfigGet(ctx, k).Val()[k]; got != want {
			t.Errorf("config %s: got %q; want %q", k, got, want)
		}
	}
	rdb.Close()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	rdb = redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Error("got a ping answer after Stop; want the server gone")
	}
}

// syncBuffer is a log destination the supervisor goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// niceOf reads a process's niceness from /proc (field 19 of its stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name (field 2) may hold spaces; the fields after it are plain.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.Atoi(f[16])
	if err != nil {
		t.Fatalf("niceness of %d in %q: %v", pid, b, err)
	}
	return n
}

// A child killed with SIGKILL is started again, empty, on the same address and at the niceness
// asked for, each time, and each death and restart is logged. (A niceness above 0 needs no
// privilege, so the test holds for any user.)
func TestRestartsAfterKill(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs syncBuffer
	p, err := Start(ctx, Config{Dir: t.TempDir(), Nice: 5, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer rdb.Close()
	for kill := 1; kill <= 2; kill++ {
		t.Run(fmt.Sprintf("kill %d", kill), func(t *testing.T) {
			if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatalf("set: %v", err)
			}
			old := p.Pid()
			if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for p.Restarts() < kill || rdb.Ping(ctx).Err() != nil {
				if time.Now().After(deadline) {
					t.Fatalf("got %d restarts, ping %v 5 s after kill %d; want %d restarts and an answer", p.Restarts(), rdb.Ping(ctx).Err(), kill, kill)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if p.Pid() == old {
				t.Errorf("got the same pid %d after the kill; want a new child", old)
			}
			if got := niceOf(t, p.Pid()); got != 5 {
				t.Errorf("niceness of the new child: got %d; want 5", got)
			}
			if err := dial(ctx, p.Addr()); err != nil {
				t.Errorf("check: got %v; want nil", err)
			}
			if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
				t.Errorf("got exists %d, %v; want 0 (the restarted server is empty)", n, err)
			}
		})
	}
	for _, want := range []string{"redis-server exited; restarting it empty", "redis-server restarted"} {
		if got := strings.Count(logs.String(), want); got != 2 {
			t.Errorf("got %d log lines %q; want 2", got, want)
		}
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := dial(ctx, p.Addr()); err == nil {
		t.Error("check after Stop: got nil; want the server gone")
	}
	time.Sleep(300 * time.Millisecond) // a supervisor still running would have restarted it
	if err := dial(ctx, p.Addr()); err == nil {
		t.Error("check 300 ms after Stop: got nil; want the server to stay gone")
	}
}

// TestPasswordRequired: with a password the server refuses clients without it, keeps it after a
// restart, and never shows it on its command line (which any local user can read).
func TestPasswordRequired(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const password = "s3cret-pass"
	p, err := Start(ctx, Config{Dir: t.TempDir(), Password: password, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	check := func(when string) {
		t.Helper()
		anon := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		defer anon.Close()
		if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("%s: ping without the password: got %v; want NOAUTH", when, err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), Password: password})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Errorf("%s: ping with the password: got %v; want PONG", when, err)
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid()))
		if err != nil || bytes.Contains(cmdline, []byte(password)) {
			t.Errorf("%s: command line %q (%v); want no password in it", when, cmdline, err)
		}
	}
	check("first start")
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Restarts() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	check("after a restart")
}

// dial reports whether the server at addr accepts connections.
func dial(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
