package likes

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// storm runs workers that like and unlike overlapping (item, user) pairs through base until
// stop closes: double taps sent concurrently, retries of 503s and refused connections, and two
// "devices" of one user racing opposite changes on one pair. Every answer's total must lie in
// 0..users+1 (the device user included). With giveUp, a worker whose request fails stops
// instead of retrying, as a user closing the app would: its change may be in the log only.
type storm struct {
	base    string
	client  *http.Client
	items   []string
	users   int
	workers int
	giveUp  bool

	requests  atomic.Int64
	badTotal  atomic.Int64
	abandoned atomic.Int64
	errs      chan error
}

func (s *storm) deadline() time.Time {
	if s.giveUp {
		return time.Now() // one attempt
	}
	return time.Now().Add(30 * time.Second)
}

func (s *storm) run(stop <-chan struct{}) {
	s.errs = make(chan error, s.workers+2)
	var wg sync.WaitGroup
	check := func(r ChangeResponse, err error) bool {
		if err != nil && s.giveUp {
			s.abandoned.Add(1)
			return false
		}
		if err != nil {
			s.errs <- err
			return false
		}
		s.requests.Add(1)
		if r.Likes < 0 || r.Likes > int64(s.users+1) {
			s.badTotal.Add(1)
		}
		return true
	}
	for w := range s.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				item := s.items[rng.IntN(len(s.items))]
				user := fmt.Sprintf("u%d", rng.IntN(s.users))
				liked := rng.IntN(2) == 0
				deadline := s.deadline()
				if rng.IntN(4) == 0 { // double tap: the same request twice at once
					var tap sync.WaitGroup
					tap.Add(1)
					go func() {
						defer tap.Done()
						check(change(s.client, s.base, item, user, liked, deadline))
					}()
					ok := check(change(s.client, s.base, item, user, liked, deadline))
					tap.Wait()
					if !ok {
						return
					}
					continue
				}
				if !check(change(s.client, s.base, item, user, liked, deadline)) {
					return
				}
			}
		}()
	}
	for d := range 2 { // two devices of one user, racing opposite changes on one pair
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !check(change(s.client, s.base, s.items[0], "device-user", (i+d)%2 == 0, s.deadline())) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(s.errs)
}

func (s *storm) err() error {
	for err := range s.errs {
		return err
	}
	return nil
}

func TestConcurrencyStorm(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "storm")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := &storm{base: e.srv.URL, client: e.client, items: []string{"viral", "warm", "cold"}, users: 24, workers: 12}

	// Sample totals while the storm runs: never below zero, never above the users.
	stop, sampled := make(chan struct{}), make(chan struct{})
	var samples, badSamples atomic.Int64
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			totals, err := e.store.Totals(ctx, s.items)
			if err != nil {
				badSamples.Add(1)
				continue
			}
			samples.Add(1)
			for _, n := range totals {
				if n < 0 || n > int64(s.users+1) {
					badSamples.Add(1)
				}
			}
		}
	}()
	time.AfterFunc(2*time.Second, func() { close(stop) })
	s.run(stop)
	<-sampled
	if err := s.err(); err != nil {
		t.Fatal(err)
	}
	if s.requests.Load() < 200 {
		t.Fatalf("got %d successful requests; want at least 200 for a storm", s.requests.Load())
	}
	if n := s.badTotal.Load(); n > 0 {
		t.Errorf("got %d answers with a total outside 0..%d; want none", n, s.users+1)
	}
	if n := badSamples.Load(); n > 0 || samples.Load() == 0 {
		t.Errorf("got %d bad total samples of %d; want 0 of at least 1", n, samples.Load())
	}
	// Every request was answered 200, so each was applied before its answer: Redis must equal
	// the log now, with no waiting for the applier.
	want := logState(t, e.topic)
	if d, err := diffState(ctx, e.store, want); err != nil || d != "" {
		t.Fatalf("after %d requests the state differs from the log:\n%s %v", s.requests.Load(), d, err)
	}
	// And the API agrees for every user, read through GET /v1/users/{id}/likes.
	for u := range s.users {
		user := fmt.Sprintf("u%d", u)
		got, err := fetchLikedBy(e.client, e.srv.URL, user, s.items)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range s.items {
			if got[it] != want[it][user] {
				t.Errorf("GET likes of %s on %s: got %v; want %v", user, it, got[it], want[it][user])
			}
		}
	}
	t.Logf("storm: %d requests answered, %d total samples", s.requests.Load(), samples.Load())
}

// The collector process is killed (SIGKILL) in the middle of a storm and started again; the
// states and totals converge to the log with no manual step. Clients whose request died with
// the process give up, so a change that reached the log but not Redis stays the pair's last
// record: only the restarted applier can repair it. The kill is repeated until it left such a
// gap (checked before the restart), so the test always exercises the repair.
func TestKillCollectorMidStorm(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	flushRedis(t)
	addr, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := func() *exec.Cmd {
		t.Helper()
		logf, err := os.OpenFile(filepath.Join(dir, "collector.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(collectorBin,
			"--kafka.brokers", infra.Kafka.Addr(), "--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
			"--redis.addr", infra.Redis.Addr(), "--collector.addr", addr, "--kafka.partitions", "4",
			"--data_dir", dir, "--log.level", "info")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	base := "http://" + addr
	waitServing := func() {
		t.Helper()
		testinfra.WaitFor(t, 60*time.Second, "collector serving likes", func() (bool, string) {
			code, body, err := do(client, http.MethodGet, base+"/v1/users/u0/likes?ids=a")
			return err == nil && code == http.StatusOK, fmt.Sprintf("%d %s %v", code, body, err)
		})
	}
	cmd := start()
	defer func() {
		if cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("collector log:\n%s", testinfra.LogTail(filepath.Join(dir, "collector.log"), 4000))
		}
	}()
	waitServing()
	rdb := redisclient.Open(infra.Redis.Addr())
	defer rdb.Close()
	store := likestate.NewStore(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var requests, abandoned int64
	for attempt := 1; ; attempt++ {
		s := &storm{base: base, client: client, items: []string{fmt.Sprintf("viral-%d", attempt), fmt.Sprintf("warm-%d", attempt)},
			users: 20, workers: 16, giveUp: true}
		stop := make(chan struct{})
		stormDone := make(chan struct{})
		go func() { defer close(stormDone); s.run(stop) }()
		time.Sleep(700 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		close(stop)
		<-stormDone
		requests += s.requests.Load()
		abandoned += s.abandoned.Load()
		if n := s.badTotal.Load(); n > 0 {
			t.Errorf("got %d answers with a total outside 0..%d; want none", n, s.users+1)
		}
		gap, err := diffState(ctx, store, logState(t, schemas.TopicLikes))
		if err != nil {
			t.Fatal(err)
		}
		cmd = start()
		waitServing()
		if gap != "" {
			t.Logf("kill %d left changes only in the log:\n%s", attempt, gap)
			break
		}
		if attempt == 5 {
			t.Fatalf("5 kills left no change only in the log (%d requests, %d abandoned); the repair was not exercised", requests, abandoned)
		}
	}
	// The storm goes on against the restarted process, on other items.
	s := &storm{base: base, client: client, items: []string{"after-a", "after-b"}, users: 20, workers: 8}
	stop := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(stop) })
	s.run(stop)
	if err := s.err(); err != nil {
		t.Fatal(err)
	}
	if s.requests.Load() == 0 {
		t.Fatal("got no request answered by the restarted collector")
	}
	t0 := time.Now()
	testinfra.WaitFor(t, 40*time.Second, "state converged to the log", func() (bool, string) {
		d, err := diffState(ctx, store, logState(t, schemas.TopicLikes))
		return err == nil && d == "", d + " " + errString(err)
	})
	t.Logf("kill -9: %d requests before the kills (%d abandoned), %d after; converged %s after the storm",
		requests, abandoned, s.requests.Load(), time.Since(t0).Round(time.Millisecond))
}

func fetchLikedBy(c *http.Client, base, user string, items []string) (map[string]bool, error) {
	url := base + "/v1/users/" + user + "/likes?ids="
	for i, it := range items {
		if i > 0 {
			url += ","
		}
		url += it
	}
	code, body, err := do(c, http.MethodGet, url)
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: got %d %s %v; want 200", url, code, body, err)
	}
	var r LikedByResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	return r.Liked, nil
}
