package redisclient

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// server is a redis-server (or Sentinel) child that is not restarted when it dies, as a machine
// that is gone is not.
type server struct {
	addr string
	port string
	cmd  *exec.Cmd
}

// runServer starts redis-server with args on a free loopback port, logging to dir/name.log, and
// returns once it accepts connections; the test's end kills it.
func runServer(t *testing.T, dir, name string, args ...string) *server {
	t.Helper()
	addr, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	args = append(args, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, name+".log"))
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	s := &server{addr: addr, port: port, cmd: cmd}
	t.Cleanup(s.kill)
	testinfra.WaitFor(t, 10*time.Second, name+" accepting connections", func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	return s
}

func (s *server) kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// A client given Sentinels follows the primary they name through a failover: the primary is
// killed with SIGKILL, the Sentinels promote the replica, and the client writes again within a
// bound, with every write the replica had acknowledged (WAIT) still there.
func TestFollowsThePrimaryThroughASentinelFailover(t *testing.T) {
	dir := t.TempDir()
	const pw = "sentinel-test-password"
	primary := runServer(t, dir, "primary", "--requirepass", pw, "--masterauth", pw)
	replica := runServer(t, dir, "replica", "--requirepass", pw, "--masterauth", pw, "--replicaof", "127.0.0.1", primary.port)
	var sentinels []string
	for i := range 3 {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel%d.conf", i))
		// Sentinel rewrites its file as it learns the topology, so each needs its own.
		if err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor tally 127.0.0.1 %s 2\n"+
			"sentinel auth-pass tally %s\nsentinel down-after-milliseconds tally 1000\n"+
			"sentinel failover-timeout tally 10000\n", primary.port, pw)), 0o600); err != nil {
			t.Fatal(err)
		}
		sentinels = append(sentinels, runServer(t, dir, fmt.Sprintf("sentinel%d", i), conf, "--sentinel").addr)
	}
	c, err := New(Options{Addr: strings.Join(sentinels, ", "), SentinelMaster: "tally", Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	testinfra.WaitFor(t, 20*time.Second, "the replica in sync", func() (bool, string) {
		n, err := c.Do(ctx, "WAIT", 1, 200).Int()
		return err == nil && n == 1, fmt.Sprintf("WAIT: %d replicas, %v", n, err)
	})
	for i := range 100 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("write before the failover: %v", err)
		}
	}
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: got %d replicas, %v; want 1", n, err)
	}

	primary.kill()
	killed, refused := time.Now(), 0
	for c.Set(ctx, "after", "x", 0).Err() != nil {
		refused++
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no write succeeded within 30 s of the primary's death (%d refused)", refused)
		}
		time.Sleep(50 * time.Millisecond)
	}
	window := time.Since(killed)
	t.Logf("failover window: writes refused for %s (%d attempts) after SIGKILL of the primary", window.Round(time.Millisecond), refused)
	if refused == 0 {
		t.Errorf("got the first write after the kill accepted; want it refused (was the primary killed?)")
	}
	if port, err := c.ConfigGet(ctx, "port").Result(); err != nil || port["port"] != replica.port {
		t.Errorf("serving port: got %v (%v); want the promoted replica's %s", port, err, replica.port)
	}
	for i := range 100 {
		if got, err := c.Get(ctx, "k"+strconv.Itoa(i)).Int(); err != nil || got != i {
			t.Fatalf("k%d after the failover: got %d, %v; want %d", i, got, err, i)
		}
	}
	if window > 15*time.Second {
		t.Errorf("failover window: got %s; want within 15 s (down-after 1 s)", window)
	}
}
