// Package progress prints a status line for long commands (batch jobs, replays, the load
// generator): how much is done, the rate, and the time left when the total is known. Lines go out
// every Every while the output is a terminal, and never otherwise, so a cron job's mail stays
// quiet. A Meter is safe for concurrent Add; its printer goroutine runs from Start to Stop.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// Options configures a Meter.
type Options struct {
	// Out receives the lines; nil is os.Stderr.
	Out io.Writer
	// What names the unit counted ("records", "clicks").
	What string
	// Total is how many units there are, when known (0: unknown, no time left).
	Total int64
	// Every is the interval between lines; 0 means 2 s.
	Every time.Duration
	// Always prints even when Out is not a terminal (a --progress flag); Never prints nothing.
	Always, Never bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Meter counts units done and prints progress lines.
type Meter struct {
	opts  Options
	start time.Time
	done  atomic.Int64
	total atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// Interactive reports whether w is a terminal, where progress lines belong.
func Interactive(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Start returns a running Meter; call Stop when the work ends.
func Start(opts Options) *Meter {
	if opts.Out == nil {
		opts.Out = os.Stderr
	}
	if opts.Every <= 0 {
		opts.Every = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.What == "" {
		opts.What = "items"
	}
	m := &Meter{opts: opts, start: opts.Now(), stop: make(chan struct{})}
	m.total.Store(opts.Total)
	if !opts.Never && (opts.Always || Interactive(opts.Out)) {
		m.wg.Go(m.run)
	}
	return m
}

// Add counts n more units done.
func (m *Meter) Add(n int64) { m.done.Add(n) }

// SetTotal sets the total once it is known.
func (m *Meter) SetTotal(n int64) { m.total.Store(n) }

func (m *Meter) run() {
	t := time.NewTicker(m.opts.Every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			fmt.Fprintln(m.opts.Out, m.Line())
			return
		case <-t.C:
			fmt.Fprintln(m.opts.Out, m.Line())
		}
	}
}

// Line is the current status: "progress: 1,250,000/4,000,000 records (31%), 410,000/s, 6s left,
// 3s elapsed".
func (m *Meter) Line() string {
	done, total := m.done.Load(), m.total.Load()
	el := m.opts.Now().Sub(m.start)
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el.Seconds()
	}
	s := "progress: " + group(done)
	if total > 0 {
		s += "/" + group(total) + " " + m.opts.What + fmt.Sprintf(" (%d%%)", min(100, done*100/total))
	} else {
		s += " " + m.opts.What
	}
	s += ", " + group(int64(rate)) + "/s"
	if total > 0 && rate > 0 && done < total {
		left := time.Duration(float64(total-done) / rate * float64(time.Second))
		s += ", " + left.Round(time.Second).String() + " left"
	}
	return s + ", " + el.Round(time.Second).String() + " elapsed"
}

// Stop ends the printer after a last line.
func (m *Meter) Stop() {
	m.once.Do(func() { close(m.stop) })
	m.wg.Wait()
}

// group writes n with thousands separators.
func group(n int64) string {
	s := fmt.Sprint(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
