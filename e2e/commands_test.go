package e2e_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Every binary answers --version with its name and build, and its --help lists its other
// commands, as the README and deploy/README.md name them.
func TestBinariesAnswerVersionAndHelp(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, bin string
		commands  []string // named by --help
	}{
		{"pipeline run", bins.pipeline, []string{"pipeline run", "pipeline infra"}},
		{"collector", bins.collector, []string{"collector keys", "collector token", "collector schema"}},
		{"aggregator", bins.aggregator, []string{"aggregator resume", "aggregator migrate"}},
		{"batchjob", bins.batchjob, []string{"batchjob likes", "batchjob clicks", "batchjob views", "batchjob counters"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(tt.bin, "--version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), tt.name+" ") || !strings.Contains(string(out), " revision ") {
				t.Errorf("--version: got %q (%v); want %q, the version and revision", out, err, tt.name)
			}
			out, err = exec.Command(tt.bin, "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("--help: %v\n%s", err, out)
			}
			for _, want := range append(tt.commands, "--version") {
				if !strings.Contains(string(out), want) {
					t.Errorf("--help: got no %q in\n%s", want, out)
				}
			}
		})
	}
}

// `aggregator migrate print` writes the DDL without a server; a wrong action is a usage error.
func TestAggregatorMigratePrints(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bins.aggregator, "migrate", "print", "--after", "12").Output()
	if err != nil || !strings.Contains(string(out), "CREATE TABLE IF NOT EXISTS schema_migrations") ||
		!strings.Contains(string(out), "-- 013_") || strings.Contains(string(out), "-- 012_") {
		t.Errorf("migrate print --after 12: got %v and\n%s\nwant schema_migrations and migration 013 only", err, out)
	}
	err = exec.Command(bins.aggregator, "migrate", "drop").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("migrate drop: got %v; want exit status 2", err)
	}
}

// `collector schema` prints the shipped tally.proto; an argument is a usage error.
func TestCollectorSchemaPrintsTheProto(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../schemas/proto/tally.proto")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bins.collector, "schema").Output(); err != nil || string(out) != string(want) {
		t.Errorf("collector schema: got %v and %d bytes; want schemas/proto/tally.proto (%d bytes)", err, len(out), len(want))
	}
	var exit *exec.ExitError
	if err := exec.Command(bins.collector, "schema", "extra").Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("collector schema extra: got %v; want exit status 2", err)
	}
}
