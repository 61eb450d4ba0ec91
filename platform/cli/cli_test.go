package cli

import "testing"

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
