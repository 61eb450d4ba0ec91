package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNightlyRunsEveryJob runs the compose cron script once (nightly run DAY BEFORE) with a
// stand-in batchjob that records its arguments and exits as told: every nightly job runs, for
// its day, whatever the others returned, and views' exit 4 (differences found) is logged as its
// report, not as a failure.
func TestNightlyRunsEveryJob(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("cron", "nightly.sh"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		exits    string // exit code of likes, clicks, counters, views
		wantLog  []string
		wantNone string
	}{
		{"all succeed", "0 0 0 0", nil, "nightly:"},
		{"recounts find differences", "0 0 4 4", []string{
			"batchjob counters --date 2026-11-30 found differences (counter_reports_daily)",
			"batchjob views --date 2026-11-29 found differences (view_recount_diffs)",
		}, "exited"},
		{"failures do not stop the others", "1 3 3 1", []string{
			"batchjob likes --date 2026-11-30 exited 1",
			"batchjob clicks --date 2026-11-30 exited 3",
			"batchjob counters --date 2026-11-30 exited 3",
			"batchjob views --date 2026-11-29 exited 1",
		}, "found differences"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			calls := filepath.Join(dir, "calls")
			fake := filepath.Join(dir, "batchjob")
			exits := strings.Fields(tt.exits)
			body := "#!/bin/sh\necho \"$*\" >> " + calls + "\ncase $1 in likes) exit " + exits[0] + ";; clicks) exit " + exits[1] + ";; counters) exit " + exits[2] + ";; views) exit " + exits[3] + ";; esac\nexit 9\n"
			if err := os.WriteFile(fake, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			// A script without the run command would sleep until 03:00: the deadline ends it.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", script, "run", "2026-11-30", "2026-11-29")
			cmd.Env = append(os.Environ(), "BATCHJOB="+fake)
			cmd.WaitDelay = time.Second // the sleep child keeps the output open
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("nightly run: %v\n%s", err, out)
			}
			got, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			want := "likes --date 2026-11-30\nclicks --date 2026-11-30\ncounters --date 2026-11-30\nviews --date 2026-11-29\n"
			if string(got) != want {
				t.Errorf("got calls\n%s; want\n%s", got, want)
			}
			for _, w := range tt.wantLog {
				if !strings.Contains(string(out), w) {
					t.Errorf("got log\n%s; want a line with %q", out, w)
				}
			}
			if strings.Contains(string(out), tt.wantNone) {
				t.Errorf("got log\n%s; want no %q", out, tt.wantNone)
			}
		})
	}
	if out, err := exec.Command("sh", script, "run", "2026-11-30").CombinedOutput(); err == nil || !strings.Contains(string(out), "usage: nightly run DAY BEFORE") {
		t.Errorf("nightly run with one day: got %v, %s; want exit 2 with the usage", err, out)
	}
}
