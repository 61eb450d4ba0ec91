// Package halt decides whether a partition's checkpoint still fits its Kafka log, and keeps the
// record of partitions halted because it does not and of the operators' decisions to resume them.
//
// The aggregator resumes a partition at its ClickHouse checkpoint, trusting the log to hold every
// offset from there on. Two faults break that trust without any error: a log that lost its tail
// (a broker lost writes it had acknowledged, or the topic was deleted and re-created) hands out
// offsets below the checkpoint again, and those new records look already counted; a log whose
// retention passed the checkpoint deleted records that were never counted. Check finds both at
// assignment; the consumer then stops that partition and waits for a Decision naming the same
// checkpoint. Nothing here knows Kafka clients or the consumer: the caller passes the log's bounds.
package halt

import (
	"fmt"
	"time"
)

// Reason is why a partition halted.
type Reason string

const (
	// TailLost: the checkpoint is beyond the log's end.
	TailLost Reason = "tail_lost"
	// Retention: the checkpoint is before the log's start.
	Retention Reason = "retention"
)

// Resume is where a halted partition's counting goes on, as the operator decides it.
type Resume string

const (
	// FromStart counts from the log's start: for Retention, where what lies between the
	// checkpoint and the start is gone.
	FromStart Resume = "start"
	// FromCheckpoint keeps the checkpoint: for TailLost, where the records the log writes again
	// below the checkpoint are not counted.
	FromCheckpoint Resume = "checkpoint"
)

// Halt is one partition stopped at assignment.
type Halt struct {
	Topic      string
	Partition  int32
	Checkpoint int64 // the offset that does not fit: the highest counted, or the lowest resumed
	Next       int64 // where the engine resumes when its checkpoint is kept
	LogStart   int64 // the log's first offset
	LogEnd     int64 // the offset the log writes next
	Reason     Reason
	Owner      string // the aggregator that halted it
	At         time.Time
}

// Check returns the halt a partition's checkpoints call for against its log's bounds, or nil
// when counting may go on. next is where the engine resumes, counted the highest offset any of
// its writes has counted up to (an engine whose writes lag one another replays from the lowest):
// the log must still hold counted, or the offsets it hands out next are new records that look
// counted, and must still start at or below next, or records were deleted uncounted. A
// partition that counted nothing (0) has nothing of its own to lose: a new deployment reading an
// old topic starts at the log's start.
func Check(topic string, partition int32, next, counted, logStart, logEnd int64) *Halt {
	h := &Halt{Topic: topic, Partition: partition, Next: next, LogStart: logStart, LogEnd: logEnd}
	switch {
	case counted <= 0:
		return nil
	case counted > logEnd:
		h.Reason, h.Checkpoint = TailLost, counted
	case next < logStart:
		h.Reason, h.Checkpoint = Retention, next
	default:
		return nil
	}
	return h
}

// ResumeAt is the offset counting goes on from once h is decided.
func (h *Halt) ResumeAt() int64 {
	if h.Resume() == FromStart {
		return h.LogStart
	}
	return h.Next
}

// Resume is the one resumption that keeps the counts honest for h's reason.
func (h *Halt) Resume() Resume {
	if h.Reason == Retention {
		return FromStart
	}
	return FromCheckpoint
}

// Error says what is wrong and how an operator resumes.
func (h *Halt) Error() string {
	return fmt.Sprintf("partition %s/%d halted: %s; to resume, run `aggregator resume --topic %s --partition %d --from %s` (%s)",
		h.Topic, h.Partition, h.fault(), h.Topic, h.Partition, h.Resume(), h.Consequence())
}

func (h *Halt) fault() string {
	if h.Reason == Retention {
		return fmt.Sprintf("its checkpoint %d is before the log's start %d: retention deleted records before they were counted",
			h.Checkpoint, h.LogStart)
	}
	return fmt.Sprintf("its checkpoint %d is beyond the log's end %d: the log lost records it had (a broker lost acknowledged writes, or the topic was re-created)",
		h.Checkpoint, h.LogEnd)
}

// Consequence states what resuming h loses, in records.
func (h *Halt) Consequence() string {
	if h.Reason == Retention {
		return fmt.Sprintf("the %d records at offsets %d-%d were deleted uncounted and stay lost; counting goes on from offset %d",
			h.LogStart-h.Checkpoint, h.Checkpoint, h.LogStart-1, h.LogStart)
	}
	return fmt.Sprintf("the records the log writes at offsets %d-%d, up to %d, are skipped uncounted; counting goes on from offset %d",
		h.LogEnd, h.Checkpoint-1, h.Checkpoint-h.LogEnd, h.Checkpoint)
}

// Decision is an operator's answer to a halt: it applies to every assignment of the partition
// that finds the same checkpoint out of its log.
type Decision struct {
	Topic      string
	Partition  int32
	Checkpoint int64
	Resume     Resume
	LogStart   int64 // the log's bounds when decided, for the record
	LogEnd     int64
	Note       string
	By         string
	At         time.Time
}

// Decide checks that r is the resumption h allows and returns the decision.
func Decide(h *Halt, r Resume, note, by string, at time.Time) (Decision, error) {
	if r != h.Resume() {
		return Decision{}, fmt.Errorf("resume %s/%d from %s: a partition halted for %s resumes only from %s (%s)",
			h.Topic, h.Partition, r, h.Reason, h.Resume(), h.Consequence())
	}
	return Decision{Topic: h.Topic, Partition: h.Partition, Checkpoint: h.Checkpoint, Resume: r,
		LogStart: h.LogStart, LogEnd: h.LogEnd, Note: note, By: by, At: at}, nil
}

// ParseResume reads a --from value.
func ParseResume(s string) (Resume, error) {
	switch r := Resume(s); r {
	case FromStart, FromCheckpoint:
		return r, nil
	}
	return "", fmt.Errorf("--from %q: want start or checkpoint", s)
}
