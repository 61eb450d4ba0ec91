package writes

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Readiness turns down only after FailingAfter failures in a row, names the step and the error,
// and comes back with the first success. The schema check (which needs ClickHouse) is covered by
// the views engine's TestProgressCheckAndRepairWhileWritesFail.
func TestCheckFollowsFailuresInARow(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "errs"})
	tr := New(Config{Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler), Errors: errs})
	boom := errors.New("boom")
	tests := []struct {
		name    string
		event   func()
		wantErr string
	}{
		{"fresh", func() {}, ""},
		{"one failure", func() { tr.Failed(now, boom) }, ""},
		{"two failures", func() { tr.Failed(now, boom) }, ""},
		{"three failures", func() { now = now.Add(time.Minute); tr.Failed(now, errors.New("write deltas: boom")) }, "3 clickhouse attempts failed in a row over 1m0s"},
		{"the step named", func() {}, "write deltas: boom"},
		{"a success", func() { tr.Succeeded(now) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.event()
			err := tr.Check(context.Background())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v; want ready", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v; want an error saying %q", err, tt.wantErr)
			}
		})
	}
	if got := testutil.ToFloat64(errs); got != 0 {
		t.Errorf("got %v failed attempts counted outside Do; want 0", got)
	}
}
