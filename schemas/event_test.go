package schemas

import (
	"fmt"
	"testing"
)

func TestFloorDiv(t *testing.T) {
	tests := []struct{ a, b, want int64 }{
		{0, 1000, 0},
		{999, 1000, 0},
		{1000, 1000, 1},
		{-1, 1000, -1},
		{-1000, 1000, -1},
		{-1001, 1000, -2},
		{7_199_999, 3_600_000, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d", tt.a, tt.b), func(t *testing.T) {
			if got := FloorDiv(tt.a, tt.b); got != tt.want {
				t.Errorf("got %d; want %d", got, tt.want)
			}
		})
	}
}
