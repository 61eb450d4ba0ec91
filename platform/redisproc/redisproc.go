// Package redisproc runs a local redis-server as a child process for the embedded defaults. The
// server keeps nothing on disk (no RDB, no AOF): tally treats Redis as a rebuildable cache and
// serving store, and must cope with it coming back empty. The Proc is owned by its starter,
// which must call Stop; if the parent dies, the child notices its parent is gone via
// Pdeathsig and exits too.
package redisproc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Proc is a running redis-server child.
type Proc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan error
	logger *slog.Logger
}

// Start launches redis-server on 127.0.0.1:port (0 picks a free port) with its working files in
// dir, and returns once it accepts connections. extra are more redis-server arguments, which win
// over the defaults (tests of passwords, ACL users and TLS: "--tls-port", port, "--port", "0").
func Start(ctx context.Context, dir string, port int, logger *slog.Logger, extra ...string) (*Proc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("start redis: redis-server not found on PATH (run scripts/setup.sh): %w", err)
	}
	// redis-server changes into --dir before opening --logfile, so a relative path would be
	// resolved twice; hand it absolute paths.
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("start redis: resolve %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start redis: create %s: %w", dir, err)
	}
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, fmt.Errorf("start redis: pick a port: %w", err)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logFile := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin, append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", dir, "--logfile", logFile,
		"--maxclients", "10000",
	}, extra...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server on %s: %w", addr, err)
	}
	p := &Proc{cmd: cmd, addr: addr, exited: make(chan error, 1), logger: logger}
	go func() { p.exited <- cmd.Wait() }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			logger.Info("redis started", "addr", addr, "pid", cmd.Process.Pid, "log", logFile)
			return p, nil
		}
		select {
		case werr := <-p.exited:
			return nil, fmt.Errorf("redis-server on %s exited at start (see %s): %v", addr, logFile, werr)
		case <-ctx.Done():
			p.kill()
			return nil, fmt.Errorf("wait for redis on %s: %w", addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("redis-server on %s did not accept connections within 10s (see %s)", addr, logFile)
		}
	}
}

// Addr is the server's host:port.
func (p *Proc) Addr() string { return p.addr }

// Stop asks the server to exit (SIGTERM) and waits for it, killing it if ctx ends first.
func (p *Proc) Stop(ctx context.Context) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil // already gone
	}
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("stop redis on %s: %w (killed)", p.addr, ctx.Err())
	}
}

func (p *Proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
