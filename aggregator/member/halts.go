package member

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/platform/retry"
)

// decisionsEvery is how often the poll loop looks for decisions on the partitions it holds
// halted; it asks ClickHouse only while one is.
const decisionsEvery = 2 * time.Second

func (h *halts) init(reg prometheus.Registerer) error {
	h.held = map[topicPartition]*halt.Halt{}
	h.gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tally_aggregator_partitions_halted",
		Help: "1 while a partition is halted because its checkpoint is beyond the log's end or before its start; see `aggregator resume`.",
	}, []string{"topic", "partition"})
	return reg.Register(h.gauge)
}

// err lists the halted partitions, for readiness.
func (h *halts) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, tp := range slices.SortedFunc(maps.Keys(h.held), compareTP) {
		errs = append(errs, h.held[tp])
	}
	return errors.Join(errs...)
}

func compareTP(a, b topicPartition) int {
	return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.id, b.id))
}

func (h *halts) add(x *halt.Halt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[topicPartition{x.Topic, x.Partition}] = x
	h.gauge.WithLabelValues(x.Topic, strconv.Itoa(int(x.Partition))).Set(1)
}

func (h *halts) remove(tp topicPartition) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.held[tp]; !ok {
		return false
	}
	delete(h.held, tp)
	h.gauge.DeleteLabelValues(tp.topic, strconv.Itoa(int(tp.id)))
	return true
}

// due returns copies of the halted partitions when it is time to look for decisions on them.
// The held halts never change once added: readiness formats them from another goroutine while
// the poll loop updates its copies.
func (h *halts) due(now time.Time) []*halt.Halt {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) == 0 || now.Before(h.next) {
		return nil
	}
	h.next = now.Add(decisionsEvery)
	out := make([]*halt.Halt, 0, len(h.held))
	for _, x := range h.held {
		c := *x
		out = append(out, &c)
	}
	return out
}

// checkLogs compares each resumed checkpoint with its log's bounds. A partition whose checkpoint
// does not fit, or whose halt at the same checkpoint is still undecided (the log may have grown
// past it since, the records below it are still new), is resumed as a recorded decision says,
// or halted: paused, recorded, reported. It retries while Kafka or ClickHouse cannot answer,
// until ctx ends.
func (s *Source) checkLogs(ctx context.Context, resume Resume) error {
	if len(resume.At) == 0 {
		return nil
	}
	var starts, ends kadm.ListedOffsets
	var open []*halt.Halt
	if err := retry.Do(ctx, 5*time.Second, func() error {
		var err error
		if starts, ends, err = s.logBounds(ctx, resume.At); err != nil {
			return err
		}
		open, err = s.c.Halts.Open(ctx)
		return err
	}, func(err error, wait time.Duration) {
		s.logger.Warn("check checkpoints against the log; retrying", "err", err, "backoff", wait)
	}); err != nil {
		return err
	}
	for topic, parts := range resume.At {
		for id, next := range parts {
			start, _ := starts.Lookup(topic, id)
			end, _ := ends.Lookup(topic, id)
			counted, ok := resume.Counted[topic][id]
			if !ok {
				counted = next
			}
			h := halt.Check(topic, id, next, counted, start.Offset, end.Offset)
			if h == nil {
				h = undecided(open, topic, id, next, counted)
			}
			if h == nil {
				continue
			}
			h.Owner, h.At = s.c.Owner, s.c.Now()
			off, err := s.onHalt(ctx, h)
			if err != nil {
				return err
			}
			parts[id] = off
		}
	}
	return nil
}

// undecided returns the open halt of topic/id at the same checkpoint, if any, as it stands now.
func undecided(open []*halt.Halt, topic string, id int32, next, counted int64) *halt.Halt {
	for _, h := range open {
		if h.Topic != topic || h.Partition != id {
			continue
		}
		if (h.Reason == halt.TailLost && h.Checkpoint == counted) || (h.Reason == halt.Retention && h.Checkpoint == next) {
			x := *h
			x.Next = next
			return &x
		}
	}
	return nil
}

// logBounds lists the start and end offsets of the topics in resume.
func (s *Source) logBounds(ctx context.Context, resume Offsets) (kadm.ListedOffsets, kadm.ListedOffsets, error) {
	topics := slices.Collect(maps.Keys(resume))
	adm := kadm.NewClient(s.cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	return starts, ends, nil
}

// onHalt follows the decision recorded for h's checkpoint, returning where the partition
// resumes, or halts it: the partition is paused before its first fetch, so nothing is counted
// from the wrong place, and the halt is recorded for the operator's command to find.
func (s *Source) onHalt(ctx context.Context, h *halt.Halt) (int64, error) {
	var d halt.Decision
	var decided bool
	err := retry.Do(ctx, 5*time.Second, func() error {
		var err error
		if d, decided, err = s.c.Halts.Decided(ctx, h); err != nil || decided {
			return err
		}
		return s.c.Halts.Record(ctx, h)
	}, func(err error, wait time.Duration) {
		s.logger.Warn("record halt; retrying", "topic", h.Topic, "partition", h.Partition, "err", err, "backoff", wait)
	})
	if err != nil {
		return 0, err
	}
	if decided {
		s.logger.Warn("resuming a partition whose checkpoint does not fit the log, as decided", "topic", h.Topic, "partition", h.Partition,
			"decided_by", d.By, "decided_at", d.At, "note", d.Note, "consequence", h.Consequence())
		return h.ResumeAt(), nil
	}
	s.cl.PauseFetchPartitions(map[string][]int32{h.Topic: {h.Partition}})
	s.halts.add(h)
	s.logger.Error("halted a partition whose checkpoint does not fit the log", "topic", h.Topic, "partition", h.Partition, "err", h.Error())
	return h.Next, nil
}

// resumeDecided resumes the held halted partitions an operator has decided on since. It runs in
// the poll loop, where the assignment cannot change; a failed look is tried again later.
func (s *Source) resumeDecided(ctx context.Context) {
	for _, h := range s.halts.due(s.c.Now()) {
		d, ok, err := s.c.Halts.Decided(ctx, h)
		if err != nil {
			s.logger.Warn("look for a decision on a halted partition", "topic", h.Topic, "partition", h.Partition, "err", err)
			continue
		}
		if !ok {
			continue
		}
		if h.Resume() == halt.FromStart {
			// Retention may have moved on since the halt: count from where the log starts now.
			starts, err := kadm.NewClient(s.cl).ListStartOffsets(ctx, h.Topic)
			if o, found := starts.Lookup(h.Topic, h.Partition); err != nil || !found || o.Err != nil {
				s.logger.Warn("read the log's start of a decided partition", "topic", h.Topic, "partition", h.Partition, "err", errors.Join(err, o.Err))
				continue
			} else {
				h.LogStart = max(h.LogStart, o.Offset)
			}
		}
		s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{h.Topic: {h.Partition: {Epoch: -1, Offset: h.ResumeAt()}}})
		s.halts.remove(topicPartition{h.Topic, h.Partition})
		s.cl.ResumeFetchPartitions(map[string][]int32{h.Topic: {h.Partition}})
		s.logger.Warn("resumed a halted partition, as decided", "topic", h.Topic, "partition", h.Partition,
			"decided_by", d.By, "decided_at", d.At, "note", d.Note, "consequence", h.Consequence())
	}
}

// unhalt forgets the halted partitions among those the group takes away, and lets them fetch
// again: a later assignment checks them afresh.
func (s *Source) unhalt(gone map[string][]int32) {
	for topic, ids := range gone {
		for _, id := range ids {
			if s.halts.remove(topicPartition{topic, id}) {
				s.cl.ResumeFetchPartitions(map[string][]int32{topic: {id}})
			}
		}
	}
}
