package testinfra

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// StartUntil starts cmd and returns once it wrote a line containing line to its standard error
// (at once for ""), for a test to signal it at a known step. A command that ends without the
// line fails the test with what it wrote. The rest of the output is read meanwhile; output
// waits for the command to close its standard error (its end) and returns all of it. Call it,
// if at all, before cmd.Wait, which closes the pipe.
func StartUntil(t testing.TB, cmd *exec.Cmd, line string) (output func() string) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	for line != "" && sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), line) {
			break
		}
	}
	if line != "" && !strings.Contains(log.String(), line) {
		_ = cmd.Wait()
		t.Fatalf("%s ended without writing %q:\n%s", cmd.Path, line, log.String())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(&log, stderr)
	}()
	return func() string {
		<-done
		return log.String()
	}
}
