package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// The topics the aggregator consumes (schemas.TopicViews and TopicClicks; not imported, so
// this package stays a pure HTTP and Kafka-admin client).
const (
	viewsTopic  = "views"
	clicksTopic = "clicks"
)

// LagSample is the consumer lag at T seconds after the load started.
type LagSample struct {
	T   float64 `json:"t"`
	Lag int64   `json:"lag"`
}

// LagReport is the consumer lag of the aggregator group over the run.
type LagReport struct {
	Group   string      `json:"group"`
	Samples []LagSample `json:"samples"`
	// Growth check: the median of the first window after warm-up against the median of the last
	// window of the run. Growing means the last exceeds the first by more than one second of
	// the achieved event rate: the consumer fell further behind than normal batching explains.
	FirstFrom    float64 `json:"first_window_from_s"`
	LastFrom     float64 `json:"last_window_from_s"`
	Window       float64 `json:"window_s"`
	FirstMedian  float64 `json:"first_median"`
	LastMedian   float64 `json:"last_median"`
	Growing      bool    `json:"growing"`
	SlopePerSec  float64 `json:"slope_per_sec"` // least-squares growth of lag after warm-up, records/s
	BehindS      float64 `json:"behind_s"`      // the last window's median in seconds of the rate, growing or not
	Drained      bool    `json:"drained"`
	DrainSeconds float64 `json:"drain_seconds"` // after the load stopped, until lag was 0
	DrainError   string  `json:"drain_error,omitempty"`
	// Missed counts samples whose answer took longer than the sampling interval (a broker busy
	// with the load): the series has a gap there; it is not an error of the system measured.
	Missed       int      `json:"missed"`
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

// lagMonitor samples the group's lag on one topic (views or clicks): the sum over partitions of the end
// offset minus the committed offset (a partition with no commit counts from 0, the start of a
// fresh log). The views topic is written without transactions, so offsets are records.
type lagMonitor struct {
	cl    *kgo.Client
	adm   *kadm.Client
	group string
	topic string
	errs  errorLog
	err   error // creating the client

	mu      sync.Mutex
	samples []LagSample
	missed  int
}

func newLagMonitor(brokers []string, sasl kafka.Security, group, topic string) *lagMonitor {
	m := &lagMonitor{group: group, topic: topic}
	dial, err := sasl.Options()
	if err != nil {
		m.err = fmt.Errorf("kafka credentials from the environment: %w", err)
		return m
	}
	m.cl, m.err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RequestTimeoutOverhead(time.Second)}, dial...)...)
	if m.err == nil {
		m.adm = kadm.NewClient(m.cl)
	}
	return m
}

func (m *lagMonitor) close() {
	if m.cl != nil {
		m.cl.Close()
	}
}

// lag reads the group's current lag once.
func (m *lagMonitor) lag(ctx context.Context) (int64, error) {
	if m.err != nil {
		return 0, fmt.Errorf("create kafka admin client: %w", m.err)
	}
	ends, err := m.adm.ListEndOffsets(ctx, m.topic)
	if err != nil {
		return 0, fmt.Errorf("list end offsets of %s: %w", m.topic, err)
	}
	if err := ends.Error(); err != nil {
		return 0, fmt.Errorf("list end offsets of %s: %w", m.topic, err)
	}
	committed, err := m.adm.FetchOffsets(ctx, m.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// The consumers have not joined yet (the sampler starts with the load): nothing is
		// committed, so every record counts.
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fetch committed offsets of group %s: %w", m.group, err)
	}
	var total int64
	var perr error
	ends.Each(func(e kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok {
			if c.Err != nil {
				perr = fmt.Errorf("committed offset of %s/%d: %w", e.Topic, e.Partition, c.Err)
			} else if c.At >= 0 {
				at = c.At
			}
		}
		total += max(0, e.Offset-at)
	})
	return total, perr
}

// sample records the lag at once and then every second until ctx ends.
func (m *lagMonitor) sample(ctx context.Context, start time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		sctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
		n, err := m.lag(sctx)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			m.mu.Lock()
			m.missed++
			m.mu.Unlock()
			continue
		}
		if err != nil {
			m.errs.add(ctx, "sample consumer lag", err)
			continue
		}
		m.mu.Lock()
		m.samples = append(m.samples, LagSample{T: time.Since(start).Seconds(), Lag: n})
		m.mu.Unlock()
	}
}

// latest is the newest sample, or -1 before the first.
func (m *lagMonitor) latest() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return -1
	}
	return m.samples[len(m.samples)-1].Lag
}

// drain waits until the lag is zero, at most d; it returns how long that took.
func (m *lagMonitor) drain(ctx context.Context, d time.Duration) (time.Duration, error) {
	if d <= 0 {
		return 0, nil
	}
	t0 := time.Now()
	deadline := t0.Add(d)
	var last int64 = -1
	var lastErr error
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := m.lag(sctx)
		cancel()
		if err == nil && n == 0 {
			return time.Since(t0), nil
		}
		last, lastErr = n, err
		if time.Now().After(deadline) || ctx.Err() != nil {
			if lastErr != nil {
				return time.Since(t0), fmt.Errorf("lag not drained within %s: %w", d, lastErr)
			}
			return time.Since(t0), fmt.Errorf("lag still %d after %s", last, d)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// report judges the samples of a run of length elapsed; rate is the achieved event rate.
func (m *lagMonitor) report(elapsed, warmup, window time.Duration, rate float64) LagReport {
	m.mu.Lock()
	samples, missed := append([]LagSample(nil), m.samples...), m.missed
	m.mu.Unlock()
	r := judgeLag(samples, elapsed, warmup, window, rate)
	r.Group, r.Missed = m.group, missed
	r.Errors, r.ErrorSamples = m.errs.snapshot()
	return r
}

// judgeLag compares the median lag of the first window after warm-up with that of the last
// window of the run. A run too short for two windows after warm-up has its warm-up dropped and
// its windows shrunk to halves of what is left, so short runs still get a (weaker) answer.
func judgeLag(samples []LagSample, elapsed, warmup, window time.Duration, rate float64) LagReport {
	r := LagReport{Samples: samples}
	if samples == nil {
		r.Samples = []LagSample{}
	}
	if warmup+2*window > elapsed {
		warmup = min(warmup, elapsed/3)
		window = (elapsed - warmup) / 2
	}
	firstFrom, lastFrom := warmup.Seconds(), (elapsed - window).Seconds()
	r.FirstFrom, r.LastFrom, r.Window = firstFrom, lastFrom, window.Seconds()
	var first, last []int64
	var xs, ys []float64
	for _, s := range samples {
		if s.T >= firstFrom && s.T < firstFrom+window.Seconds() {
			first = append(first, s.Lag)
		}
		if s.T > lastFrom {
			last = append(last, s.Lag)
		}
		if s.T >= firstFrom {
			xs = append(xs, s.T)
			ys = append(ys, float64(s.Lag))
		}
	}
	r.FirstMedian, r.LastMedian = median(first), median(last)
	r.Growing = len(first) > 0 && len(last) > 0 && r.LastMedian-r.FirstMedian > rate
	r.SlopePerSec = slope(xs, ys)
	if rate > 0 {
		r.BehindS = r.LastMedian / rate
	}
	return r
}
