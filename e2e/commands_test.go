package e2e_test

import (
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
		{"collector", bins.collector, []string{"collector keys", "collector token"}},
		{"aggregator", bins.aggregator, []string{"aggregator resume"}},
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
