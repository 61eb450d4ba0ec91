// Package redisproc runs a local redis-server as a supervised child process for the embedded
// defaults. The server keeps nothing on disk (no RDB, no AOF): tally treats Redis as a
// rebuildable serving store, and must cope with it coming back empty. It is bounded in memory
// and never evicts: like state and item totals are state, not a cache, so at the bound writes
// fail loudly instead of silently dropping keys. Hashes stay compact (listpack) up to the sizes
// platform/totals' buckets are laid out for.
//
// Supervision: when the child exits on its own (crash, OOM kill, kill -9) it is logged and
// started again on the same address, after a backoff that doubles from 100 ms to 5 s while
// restarts keep failing or the child keeps dying young. The new server is empty; its clients
// rebuild what they keep there (the likes applier replays the log when its readiness marker is
// gone, the aggregator rebuilds the item totals from ClickHouse).
//
// Lifecycle: the Proc is owned by its starter, which must call Stop; Stop ends the supervising
// goroutine and the child. If the parent dies, the child notices via Pdeathsig and exits too.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tallypipeline/tally/devstack/loopback"
)

const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	// A child that ran this long before dying restarts after the first backoff again.
	healthyRun = 30 * time.Second
	// startTimeout bounds one start: launch until the server accepts connections.
	startTimeout = 10 * time.Second
)

// Config says where and how a redis-server runs.
type Config struct {
	// Dir holds the server's working files (its log).
	Dir string
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// MaxMemory is the server's maxmemory ("1gb", "512mb", bytes); empty means DefaultMaxMemory.
	MaxMemory string
	// Nice is the server's niceness, -20..19; 0 leaves it at the parent's. Redis serves every
	// page read and every flush's totals from one thread, while the all-in-one beside it runs
	// dozens (the Go runtime's, the embedded engine's): at equal priority that thread waits
	// its turn behind them whenever the machine is busy, and each read with it. Below 0 it
	// goes first, as it would on a machine of its own. Raising the priority needs root or
	// CAP_SYS_NICE; refused, it is logged and the server runs at the parent's.
	Nice int
	// Password, if set, is required of every client (requirepass). It reaches the server on its
	// standard input, never on the command line, which any local user can read in /proc.
	Password string
	// Extra are more redis-server arguments, which win over the defaults (tests of passwords,
	// ACL users and TLS: "--tls-port", port, "--port", "0").
	Extra  []string
	Logger *slog.Logger
}

// DefaultMaxMemory bounds a server whose Config names no bound.
const DefaultMaxMemory = "1gb"

// Hash encoding limits: platform/totals sizes its buckets to stay within them (see
// totals.ListpackEntries and totals.ListpackValue; a test there checks they agree).
const (
	hashListpackEntries = "512"
	hashListpackValue   = "128"
)

// Proc is a supervised redis-server child.
type Proc struct {
	bin, dir, addr, logFile string
	port                    int
	maxMemory               string
	password                string
	nice                    int
	extra                   []string
	logger                  *slog.Logger

	ctx    context.Context // ends when Stop begins
	cancel context.CancelFunc
	done   chan struct{} // closed when the supervisor has ended and the child is gone

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan error // the current child's exit
	restarts int
}

// Start launches redis-server as cfg says, returns once it accepts connections, and keeps it
// running until Stop.
func Start(ctx context.Context, cfg Config) (*Proc, error) {
	dir, port, logger := cfg.Dir, cfg.Port, cfg.Logger
	maxMemory := cfg.MaxMemory
	if maxMemory == "" {
		maxMemory = DefaultMaxMemory
	}
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
		if port, err = loopback.FreePort(); err != nil {
			return nil, fmt.Errorf("start redis: pick a port: %w", err)
		}
	}
	if strings.ContainsAny(cfg.Password, "\"\\\r\n") {
		return nil, errors.New("start redis: the password must not contain quotes, backslashes or line breaks")
	}
	p := &Proc{bin: bin, dir: dir, port: port, maxMemory: maxMemory, nice: cfg.Nice, extra: cfg.Extra, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		logFile: filepath.Join(dir, "redis.log"), logger: logger, done: make(chan struct{}), password: cfg.Password}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	if err := p.launch(sctx); err != nil {
		p.cancel()
		return nil, err
	}
	go p.supervise()
	return p, nil
}

// Addr is the server's host:port; it stays the same across restarts.
func (p *Proc) Addr() string { return p.addr }

// Pid is the process id of the current child.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Restarts is how many times the child was started again after exiting on its own.
func (p *Proc) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Stop ends supervision and asks the server to exit (SIGTERM), killing it if ctx ends first.
func (p *Proc) Stop(ctx context.Context) error {
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		_ = p.cmd.Process.Kill()
		p.mu.Unlock()
		<-p.done
		return fmt.Errorf("stop redis on %s: %w (killed)", p.addr, ctx.Err())
	}
}

// supervise waits for the child to exit and starts it again, until Stop.
func (p *Proc) supervise() {
	defer close(p.done)
	backoff := firstBackoff
	for {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.mu.Unlock()
		started := time.Now()
		select {
		case <-p.ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			return
		case err := <-exited:
			if time.Since(started) > healthyRun {
				backoff = firstBackoff
			}
			p.logger.Error("redis-server exited; restarting it empty", "addr", p.addr, "pid", cmd.Process.Pid, "err", err,
				"ran", time.Since(started).Round(time.Millisecond), "backoff", backoff, "log", p.logFile)
		}
		for {
			t := time.NewTimer(backoff)
			select {
			case <-p.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, maxBackoff)
			err := p.launch(p.ctx)
			if err == nil {
				p.mu.Lock()
				p.restarts++
				n := p.restarts
				p.mu.Unlock()
				p.logger.Warn("redis-server restarted", "addr", p.addr, "pid", p.Pid(), "restarts", n)
				break
			}
			if p.ctx.Err() != nil {
				return
			}
			p.logger.Error("restart redis-server; retrying", "addr", p.addr, "err", err, "backoff", backoff)
		}
	}
}

// launch starts a child and waits until it accepts connections; on failure no child is left.
func (p *Proc) launch(ctx context.Context) error {
	var args []string
	if p.password != "" {
		args = append(args, "-") // the config file's lines come on standard input
	}
	cmd := exec.Command(p.bin, append(append(args,
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", p.dir, "--logfile", p.logFile,
		"--maxclients", "10000",
		"--maxmemory", p.maxMemory, "--maxmemory-policy", "noeviction",
		"--hash-max-listpack-entries", hashListpackEntries, "--hash-max-listpack-value", hashListpackValue,
	), p.extra...)...)
	if p.password != "" {
		cmd.Stdin = strings.NewReader("requirepass \"" + p.password + "\"\n")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server on %s: %w", p.addr, err)
	}
	if p.nice != 0 {
		// Linux's niceness is per thread; this sets the main thread's, the one that serves.
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, p.nice); err != nil {
			p.logger.Warn("set redis-server niceness; it runs at the parent's", "nice", p.nice, "err", err)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("redis-server on %s exited at start (see %s): %w", p.addr, p.logFile, errors.Join(werr, err))
		case <-ctx.Done():
			kill()
			return fmt.Errorf("wait for redis on %s: %w", p.addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			kill()
			return fmt.Errorf("redis-server on %s did not accept connections within %s (see %s)", p.addr, startTimeout, p.logFile)
		}
	}
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	p.logger.Info("redis started", "addr", p.addr, "pid", cmd.Process.Pid, "log", p.logFile)
	return nil
}
