package testinfra

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// StartUntil starts cmd and returns once it wrote a line containing line to its standard error
// (at once for ""), for a test to signal it at a known step; the rest of that output is
// discarded. A command that ends without the line fails the test with what it wrote.
func StartUntil(t testing.TB, cmd *exec.Cmd, line string) {
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
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
}
