package testinfra

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Main is the body of a TestMain that needs the infrastructure: it starts it, hands it to setup
// (which keeps it for the tests and may prepare more, e.g. Build a binary), runs the tests and
// stops everything. Use it as os.Exit(testinfra.Main(m, setup)).
func Main(m *testing.M, setup func(in *Infra) error) int {
	in, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start test infrastructure:", err)
		return 1
	}
	defer in.Stop()
	if err := setup(in); err != nil {
		fmt.Fprintln(os.Stderr, "set up tests:", err)
		return 1
	}
	return m.Run()
}

// Build compiles the command pkg (e.g. "github.com/tallypipeline/tally/collector/cmd/collector") into dir, without the
// race detector, for tests that run it as a real process, and returns the binary's path.
func Build(dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// VerifyNoLeaks checks, after the test and all its cleanups, that every goroutine the test
// started has ended. Call it first in a test so its cleanup runs last.
func VerifyNoLeaks(t *testing.T) {
	// The shared embedded broker's side of a client connection ends on its own schedule, and its
	// reaper's client (devstack/kafkabroker) makes new reads on the broker's side at any time:
	// they are the test infrastructure's goroutines, not the test's.
	opts := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read"),
		goleak.IgnoreTopFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).write"),
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1")}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}
