package e2e_test

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/devstack/embedded"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// module is the project's module path, which the commands' package paths start with.
const module = "github.com/tallypipeline/tally"

// binaries builds the pipeline, collector, aggregator and batchjob commands once per test binary, without
// the race detector, so crash tests run real processes at production speed.
type binaries struct{ pipeline, collector, aggregator, batchjob string }

var buildOnce = sync.OnceValues(func() (binaries, error) {
	var b binaries
	for bin, pkg := range map[*string]string{&b.pipeline: "allinone/cmd/pipeline", &b.collector: "collector/cmd/collector",
		&b.aggregator: "aggregator/cmd/aggregator", &b.batchjob: "batchjob/cmd/batchjob"} {
		var err error
		if *bin, err = testinfra.Build(binDir, module+"/"+pkg); err != nil {
			return b, err
		}
	}
	return b, nil
})

// binDir holds the built commands (about 250 MB) for the life of the test binary; TestMain
// removes it, since t.TempDir belongs to one test and the binaries are shared by several.
var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "tally-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, "create the binaries' directory:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(binDir)
	os.Exit(code)
}

// proc is a child process whose output goes to a log file the test prints on failure.
type proc struct {
	name string
	bin  string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(t *testing.T, name, bin, logDir string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, bin: bin, args: args, log: filepath.Join(logDir, name+".log")}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM lets `pipeline infra` stop its redis-server child before the directory goes.
		_ = p.stop(syscall.SIGTERM, 20*time.Second)
		if t.Failed() {
			t.Logf("--- tail of %s log:\n%s", p.name, testinfra.LogTail(p.log, 6000))
		}
		keepLog(t, p)
	})
	return p
}

// keepLog copies p's log to $TALLY_E2E_LOGS/<test name>/, when set, for reading after a run
// that passed too (a slow handover, a retry storm): the test's own directory is removed.
func keepLog(t *testing.T, p *proc) {
	root := os.Getenv("TALLY_E2E_LOGS")
	if root == "" {
		return
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	b, err := os.ReadFile(p.log)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, p.name+".log"), b, 0o644)
	}
	if err != nil {
		t.Logf("keep %s log: %v", p.name, err)
	}
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== start %s %v at %s\n", p.name, p.args, time.Now().Format(time.RFC3339Nano))
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Uncompressed batches: the test's own consumers are race-built, and under the race detector
	// sync.Pool drops a quarter of what is put back, so decompressing the default lz4 (frames of
	// 4 MiB blocks) allocated and faulted in 4 MiB for most batches fetched: over half of the test
	// binary's CPU. What these tests check does not depend on the codec; platform/kafka's
	// TestCompression reads every codec back, and the in-process tests keep the default.
	p.cmd.Env = append(os.Environ(), config.EnvName("kafka.compression")+"=none")
	// If the test binary dies (a timeout), its children die too instead of outliving the run.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); f.Close(); close(p.done) }()
	return nil
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends sig and waits for the exit.
func (p *proc) stop(sig syscall.Signal, within time.Duration) error {
	p.signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		p.signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not exit within %s of %v", p.name, within, sig)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// infraEnv waits for the env file the embedded stack writes under dir once its servers run, and
// returns its lines.
func infraEnv(t *testing.T, dir string) map[string]string {
	t.Helper()
	var env map[string]string
	testinfra.WaitFor(t, time.Minute, "the embedded stack writes "+embedded.EnvFile, func() (bool, string) {
		var err error
		env, err = embedded.ReadEnvFile(dir)
		return err == nil, fmt.Sprint(err)
	})
	return env
}

// adminOptions connects to the embedded engine of the all-in-one or infra process on dir as
// its administrator, database tally.
func adminOptions(t *testing.T, dir string) chclient.Options {
	env := infraEnv(t, dir)
	return chclient.Options{Addr: env[config.EnvName("clickhouse.addr")], Database: "tally", Username: env[config.EnvName("clickhouse.username")], Password: env[config.EnvName("clickhouse.password")]}
}

// kafkaConn is how the test's own Kafka clients reach the embedded brokers: as their SASL user.
type kafkaConn struct {
	addr string // the brokers, comma-separated
	sec  kafka.Security
}

// kafkaOf reads the broker's address and user from the embedded stack's env file lines.
func kafkaOf(env map[string]string) kafkaConn {
	return kafkaConn{addr: env[config.EnvName("kafka.brokers")], sec: kafka.Security{SASLMechanism: env[config.EnvName("kafka.sasl.mechanism")],
		Username: env[config.EnvName("kafka.sasl.username")], Password: env[config.EnvName("kafka.sasl.password")]}}
}

// client opens a Kafka client on the broker, named oracle.
func (kc kafkaConn) client(logger *slog.Logger) (*kgo.Client, error) {
	dial, err := kc.sec.Options()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(kafka.ClientOptions(strings.Split(kc.addr, ","), "oracle", logger, nil), dial...)...)
}
