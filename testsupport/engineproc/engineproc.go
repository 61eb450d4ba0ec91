// Package engineproc runs the embedded ClickHouse in a process of its own (`pipeline infra`),
// for tests that kill -9 the engine under a command and start it again on its data. It is apart
// from testinfra, which the platform packages' own tests import, because it reads the embedded
// stack's env file (devstack/embedded, platform/config). An EngineProcess is the test's: the
// test's end stops it.
package engineproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/devstack/embedded"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// EngineProcess is `pipeline infra` run for its ClickHouse alone, for tests that kill -9 the
// engine under a command: the command reaches the test's own Kafka and Redis, and the process's
// broker and Redis serve nobody. It keeps its data directory and ClickHouse address across
// restarts.
type EngineProcess struct {
	bin, dir, addr string
	cmd            *exec.Cmd
	// Flags reach the engine's database tally as its administrator, as a binary's flags.
	Flags []string
	opts  chclient.Options
}

// Start builds the pipeline binary into a directory of t's and starts it as
// `pipeline infra` on a data directory of its own.
func Start(t *testing.T) *EngineProcess {
	t.Helper()
	bin, err := testinfra.Build(t.TempDir(), "github.com/tallypipeline/tally/allinone/cmd/pipeline")
	if err != nil {
		t.Fatal(err)
	}
	e := &EngineProcess{bin: bin, dir: t.TempDir(), addr: testinfra.MustFreeAddr(t)}
	e.Start(t)
	t.Cleanup(e.stop)
	return e
}

// Start starts the process (again, after Kill) and waits for its engine and its env file.
func (e *EngineProcess) Start(t *testing.T) {
	t.Helper()
	_, redisPort, _ := strings.Cut(testinfra.MustFreeAddr(t), ":")
	log, err := os.OpenFile(filepath.Join(e.dir, "infra.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	e.cmd = exec.Command(e.bin, "infra", "--data_dir", e.dir, "--embedded.clickhouse_addr", e.addr,
		"--embedded.kafka_addr", testinfra.MustFreeAddr(t), "--embedded.redis_port", redisPort)
	e.cmd.Stdout, e.cmd.Stderr = log, log
	// If the test binary dies (a timeout), the engine dies too instead of outliving the run.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testinfra.WaitHTTP(t, time.Minute, "http://"+e.addr+"/ping")
	var env map[string]string
	testinfra.WaitFor(t, time.Minute, "the embedded stack writes "+embedded.EnvFile, func() (bool, string) {
		env, err = embedded.ReadEnvFile(e.dir)
		return err == nil, fmt.Sprint(err)
	})
	e.opts = chclient.Options{Addr: e.addr, Database: "tally", Username: env[config.EnvName("clickhouse.username")], Password: env[config.EnvName("clickhouse.password")]}
	e.Flags = []string{"--clickhouse.addr", e.addr, "--clickhouse.username", e.opts.Username, "--clickhouse.password", e.opts.Password, "--clickhouse.database", "tally"}
}

// Open connects to the engine's database tally until the test ends.
func (e *EngineProcess) Open(t *testing.T, ctx context.Context) driver.Conn {
	t.Helper()
	conn, err := chclient.Open(ctx, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Kill kill -9s the process and waits for its end.
func (e *EngineProcess) Kill(t *testing.T) {
	t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = e.cmd.Wait()
}

// KillDuring starts cmd, kill -9s the engine delay after cmd wrote a line containing line, and
// returns once cmd ended. It fails t unless cmd ended well (the kill came after its last
// statement) or exited 1 logging an error that names what (the write it lost).
func (e *EngineProcess) KillDuring(t *testing.T, cmd *exec.Cmd, line string, delay time.Duration, what string) {
	t.Helper()
	output := testinfra.StartUntil(t, cmd, line)
	time.Sleep(delay)
	e.Kill(t)
	out := output()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		t.Logf("the command ended well: the kill came after its last statement")
	case !errors.As(err, &ee) || ee.ExitCode() != 1:
		t.Fatalf("command: got %v; want exit 1 or 0:\n%s", err, out)
	case !strings.Contains(out, what) || !strings.Contains(out, "level=ERROR"):
		t.Fatalf("command: got exit 1 with output\n%s\nwant an error naming %q", out, what)
	}
}

// stop ends the process with SIGTERM, so that it stops its redis-server child before the
// directory goes.
func (e *EngineProcess) stop() {
	if e.cmd.ProcessState != nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = e.cmd.Process.Kill()
		<-done
	}
}
