package counters

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestClickHouseKilledWhileWriting kill -9s the ClickHouse the command writes its report to
// (the embedded engine of `pipeline infra`, a process of its own) at a random moment of the
// write, then starts it again on its data. After each kill: the report view shows the last
// complete version, never a part of the interrupted one; the command has failed saying which
// write it lost (or ended well, if the kill came after its last statement); a rerun writes a
// newer complete version and says so. It fails if the version row is written before the rows,
// or a lost statement goes unreported.
func TestClickHouseKilledWhileWriting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pipeline, err := testinfra.Build(t.TempDir(), "github.com/tallypipeline/tally/allinone/cmd/pipeline")
	if err != nil {
		t.Fatal(err)
	}
	eng := &engineProc{bin: pipeline, dir: t.TempDir(), addr: testinfra.MustFreeAddr(t)}
	eng.start(t)
	t.Cleanup(eng.stop)
	f := &fixture{db: "tally", conn: eng.open(t, ctx)}
	if _, err := migrate.Apply(ctx, f.conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	f.clickhouse = eng.flags
	f.ns = f.namespace(t, ctx, "chkill", "eventual")
	day := base.AddDate(0, 0, 4) // a day of its own: the other tests' records are not read
	f.seed(t, ctx, day, killCounters)
	args := []string{"--namespace", f.ns, "--batchjob.lock_ttl", "3s"}
	_, writeTook := f.timeRun(t, ctx, day, args)
	seen := f.complete(t, ctx, day, "after the first run")

	for i := range 2 {
		delay := time.Duration(rand.Int64N(int64(writeTook)))
		t.Run(fmt.Sprintf("kill %d", i), func(t *testing.T) {
			cmd := exec.CommandContext(ctx, bin, f.argv(day, args...)...)
			output := testinfra.StartUntil(t, cmd, writing)
			time.Sleep(delay)
			eng.kill(t)
			out := output()
			err := cmd.Wait()
			var ee *exec.ExitError
			switch {
			case err == nil:
				t.Logf("the run ended well: the kill came after its last statement")
			case !errors.As(err, &ee) || ee.ExitCode() != 1:
				t.Fatalf("run: got %v; want exit 1 or 0:\n%s", err, out)
			case !strings.Contains(out, "counter report") || !strings.Contains(out, "level=ERROR"):
				t.Fatalf("run: got exit 1 with output\n%s\nwant an error naming the report write it lost", out)
			}
			eng.start(t)
			f.conn = eng.open(t, ctx)
			t.Logf("engine killed %v into the write (a write took %v): %d rows beyond version %d", delay, writeTook, f.beyond(t, ctx, day, seen), seen)
			if v := f.complete(t, ctx, day, "after the engine's restart"); v < seen {
				t.Fatalf("after the engine's restart: got version %d; want %d or newer", v, seen)
			}
			seen = f.rerun(t, ctx, day, args, seen)
		})
	}
}

// engineProc is `pipeline infra` run for its ClickHouse alone: the command reaches the test's
// own Kafka and Redis, and the process's broker and Redis serve nobody. It keeps its data
// directory and ClickHouse address across restarts.
type engineProc struct {
	bin, dir, addr string
	cmd            *exec.Cmd
	// flags reach the engine's database tally as its administrator.
	flags []string
	opts  chclient.Options
}

func (e *engineProc) start(t *testing.T) {
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
	e.flags = []string{"--clickhouse.addr", e.addr, "--clickhouse.username", e.opts.Username, "--clickhouse.password", e.opts.Password, "--clickhouse.database", "tally"}
}

// open connects to the engine's database tally until the test ends.
func (e *engineProc) open(t *testing.T, ctx context.Context) driver.Conn {
	t.Helper()
	conn, err := chclient.Open(ctx, e.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// kill kill -9s the process and waits for its end.
func (e *engineProc) kill(t *testing.T) {
	t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = e.cmd.Wait()
}

// stop ends the process with SIGTERM, so that it stops its redis-server child before the
// directory goes.
func (e *engineProc) stop() {
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
