package cli

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/tallypipeline/tally/platform/config"
)

func TestProcs(t *testing.T) {
	tests := []struct {
		name                 string
		goDefault, perCPU, w int
		envSet               bool
	}{
		{"two CPUs, four per CPU", 2, 4, 8, false},
		{"one per CPU is Go's default", 2, 1, 2, false},
		{"GOMAXPROCS in the environment wins", 3, 4, 3, true},
		{"unset multiplier keeps Go's default", 2, 0, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := procs(tt.goDefault, tt.perCPU, tt.envSet); got != tt.w {
				t.Errorf("got %d; want %d", got, tt.w)
			}
		})
	}
}

func TestContainerLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		files []string
		want  int64
	}{
		{"cgroup v2 limit", []string{write("v2", "2147483648\n")}, 2 << 30},
		{"cgroup v2 without a limit", []string{write("v2max", "max\n"), write("v1b", "1073741824\n")}, 0},
		{"cgroup v1 limit after a missing v2 file", []string{filepath.Join(dir, "none"), write("v1", "1073741824\n")}, 1 << 30},
		{"cgroup v1 without a limit", []string{write("v1max", "9223372036854771712\n")}, 0},
		{"no file", []string{filepath.Join(dir, "none")}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := containerLimit(tt.files...); got != tt.want {
				t.Errorf("got %d; want %d", got, tt.want)
			}
		})
	}
}

// tuneMemory changes the process's collector settings: each case puts them back.
func TestTuneMemory(t *testing.T) {
	tests := []struct {
		name         string
		env          map[string]string
		rt           config.Runtime
		container    int64
		wantGC       int
		wantLimit    int64
		wantErr      bool
		wantEnvWins  bool
		wantLimitSet bool
	}{
		{name: "auto takes the share of the container", rt: config.Runtime{GCPercent: 200, MemoryLimit: "auto"}, container: 4 << 30,
			wantGC: 200, wantLimit: 2 << 30, wantLimitSet: true},
		{name: "a size", rt: config.Runtime{GCPercent: 100, MemoryLimit: "1GiB"},
			wantGC: 100, wantLimit: 1 << 30, wantLimitSet: true},
		{name: "GOGC and GOMEMLIMIT win", env: map[string]string{"GOGC": "150", "GOMEMLIMIT": "3GiB"}, rt: config.Runtime{GCPercent: 300, MemoryLimit: "1GiB"},
			wantGC: 0, wantLimit: 0, wantEnvWins: true},
		{name: "collect only at a limit there is none of", rt: config.Runtime{GCPercent: -1, MemoryLimit: "auto"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
			defer func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) }()
			got, err := tuneMemory(tt.rt, 0.5, tt.container)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v; want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.GCPercent != tt.wantGC || got.Limit != tt.wantLimit || got.GCFromEnv != tt.wantEnvWins || got.LimitEnv != tt.wantEnvWins {
				t.Errorf("got %+v; want gc %d, limit %d, environment winning %v", got, tt.wantGC, tt.wantLimit, tt.wantEnvWins)
			}
			if tt.wantLimitSet {
				if l := debug.SetMemoryLimit(-1); l != tt.wantLimit {
					t.Errorf("got runtime memory limit %d; want %d", l, tt.wantLimit)
				}
				if p := debug.SetGCPercent(100); p != tt.wantGC {
					t.Errorf("got runtime GC percent %d; want %d", p, tt.wantGC)
				}
			}
		})
	}
}
