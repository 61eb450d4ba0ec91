package progress

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time       { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestLine(t *testing.T) {
	tests := []struct {
		name        string
		total, done int64
		after       time.Duration
		want        string
	}{
		{"known total", 4_000_000, 1_000_000, 2 * time.Second, "progress: 1,000,000/4,000,000 records (25%), 500,000/s, 6s left, 2s elapsed"},
		{"unknown total", 0, 1234, time.Second, "progress: 1,234 records, 1,234/s, 1s elapsed"},
		{"finished", 10, 10, time.Second, "progress: 10/10 records (100%), 10/s, 1s elapsed"},
		{"nothing yet", 10, 0, 0, "progress: 0/10 records (0%), 0/s, 0s elapsed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			m := Start(Options{What: "records", Total: tt.total, Never: true, Now: c.now})
			defer m.Stop()
			m.Add(tt.done)
			c.add(tt.after)
			if got := m.Line(); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

func TestQuietUnlessTerminal(t *testing.T) {
	var buf bytes.Buffer // not a terminal
	m := Start(Options{Out: &buf, Every: time.Millisecond})
	m.Add(5)
	time.Sleep(20 * time.Millisecond)
	m.Stop()
	if buf.Len() != 0 {
		t.Errorf("printed %q to a non-terminal; want nothing (cron stays quiet)", buf.String())
	}
	m = Start(Options{Out: &buf, Every: time.Millisecond, Always: true, What: "clicks"})
	m.Add(5)
	time.Sleep(20 * time.Millisecond)
	m.Stop()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-1], "5 clicks") {
		t.Errorf("got %q; want several lines ending with the count of 5 clicks", buf.String())
	}
}
