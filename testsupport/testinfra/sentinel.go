package testinfra

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a redis-server (or Sentinel) child that is not restarted when it dies, as a
// machine that is gone is not. The test's end kills it.
type RedisServer struct {
	Addr string
	Port string
	cmd  *exec.Cmd
}

// StartRedisServer starts redis-server with args on a free loopback port, without persistence,
// logging to dir/name.log, and returns once it accepts connections.
func StartRedisServer(t testing.TB, dir, name string, args ...string) *RedisServer {
	t.Helper()
	addr := MustFreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	args = append(args, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, name+".log"))
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	s := &RedisServer{Addr: addr, Port: port, cmd: cmd}
	t.Cleanup(s.Kill)
	WaitFor(t, 10*time.Second, name+" accepting connections", func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	return s
}

// Kill ends the server with SIGKILL, once.
func (s *RedisServer) Kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// SentinelRedis is a Redis primary with one replica, watched by three Sentinels under Master.
type SentinelRedis struct {
	Primary, Replica *RedisServer
	Sentinels        []string // the Sentinels' addresses
	Master           string
}

// StartSentinelRedis starts a primary and a replica requiring password, and three Sentinels
// that declare the primary down after 1 s without answers (quorum 2) and promote the replica.
func StartSentinelRedis(t testing.TB, dir, password string) *SentinelRedis {
	t.Helper()
	r := &SentinelRedis{Master: "tally"}
	r.Primary = StartRedisServer(t, dir, "redis-primary", "--requirepass", password, "--masterauth", password)
	r.Replica = StartRedisServer(t, dir, "redis-replica", "--requirepass", password, "--masterauth", password,
		"--replicaof", "127.0.0.1", r.Primary.Port)
	for i := range 3 {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel%d.conf", i))
		// Sentinel rewrites its file as it learns the topology, so each needs its own.
		if err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s 2\n"+
			"sentinel auth-pass %s %s\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 10000\n", r.Master, r.Primary.Port, r.Master, password, r.Master, r.Master)), 0o600); err != nil {
			t.Fatal(err)
		}
		r.Sentinels = append(r.Sentinels, StartRedisServer(t, dir, fmt.Sprintf("sentinel%d", i), conf, "--sentinel").Addr)
	}
	return r
}
