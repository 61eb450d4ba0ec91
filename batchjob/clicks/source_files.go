package clicks

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// FilesSource reads the sink's Parquet files of the clicks and verdicts topics, and from Kafka
// the records the files do not hold yet. Each read:
//
//  1. snapshots the topic's Kafka offsets as KafkaSource does (end offsets, and the stretch of
//     the log that can hold the records wanted, by produce time);
//  2. reads the sink's flush markers and then its consumer group's committed offsets
//     (rawlog.Complete): below a partition's marker every flush is complete, and the marker's
//     own flush too once the group committed past it, so the files hold every decodable record
//     below that offset;
//  3. reads the files of the hours wanted whose flush lies below the marker (a file at or above
//     it may belong to a flush still being written and is skipped);
//  4. reads from Kafka each partition from there (or from where the time says the wanted
//     records begin, if that is later) up to the end offset of step 1.
//
// So no record is read twice and none below the snapshot is missed, whatever the sink's lag. A
// partition whose files end below the Kafka log's start, where the time lookup cannot tell
// that the lost records were too old to matter, is an error: the run stops rather than count
// from a gap. Clicks are filed by event hour and verdicts by decided_at hour, so the verdict
// files read are those from since - Early on, the bound KafkaSource applies to produce time.
//
// Name is "parquet" until a read takes records from Kafka, "parquet+kafka" from then on.
type FilesSource struct {
	store store.Store
	kafka *KafkaSource
	group string
	tail  bool
}

// NewFilesSource returns a source reading st, with k for the offsets and the records beyond the
// files; group is the sink's consumer group (sink.group).
func NewFilesSource(st store.Store, k *KafkaSource, group string) *FilesSource {
	return &FilesSource{store: st, kafka: k, group: group}
}

// Name implements Source.
func (s *FilesSource) Name() string {
	if s.tail {
		return "parquet+kafka"
	}
	return "parquet"
}

// Clicks implements Source.
func (s *FilesSource) Clicks(ctx context.Context, from, to time.Time, fn func(int64, []Click) error) (logread.Stats, error) {
	pl, err := s.planClicks(ctx, from, to)
	if err != nil {
		return logread.Stats{}, err
	}
	var batch []Click
	return pl.read(ctx, s, func(_ int32, rows []rawlog.ClickKey) error {
		batch = batch[:0]
		for i := range rows {
			r := &rows[i]
			c := Click{ClickID: r.ClickID, AdID: r.AdID, CampaignID: r.CampaignID, Device: r.Device, TS: r.TS, Partition: r.Partition, Offset: r.Offset}
			if r.FraudScore != nil {
				c.FraudScore, c.HasFraudScore = *r.FraudScore, true
			}
			batch = append(batch, c)
		}
		return fn(int64(len(rows)), batch)
	}, clickDecoder(from, to, fn))
}

// Verdicts implements Source.
func (s *FilesSource) Verdicts(ctx context.Context, since time.Time, fn func(int64, []Verdict) error) (logread.Stats, error) {
	pl, err := s.planVerdicts(ctx, since)
	if err != nil {
		return logread.Stats{}, err
	}
	fraud := schemas.VerdictFraud.String()
	var batch []Verdict
	return pl.read(ctx, s, func(_ int32, rows []rawlog.FraudVerdictRow) error {
		batch = batch[:0]
		for i := range rows {
			r := &rows[i]
			batch = append(batch, Verdict{ClickID: r.ClickID, Fraud: r.Verdict == fraud, Reason: r.Reason, DecidedAt: r.DecidedAt,
				Partition: r.Partition, Offset: r.Offset})
		}
		return fn(int64(len(rows)), batch)
	}, verdictDecoder(fn))
}

// Size implements Source: the rows in the footers of the files the reads would open, and the
// offsets of the Kafka spans beyond them.
func (s *FilesSource) Size(ctx context.Context, from, to time.Time) (int64, error) {
	c, err := s.planClicks(ctx, from, to)
	if err != nil {
		return 0, err
	}
	v, err := s.planVerdicts(ctx, from)
	if err != nil {
		return 0, err
	}
	nc, err := c.size(ctx)
	if err != nil {
		return 0, err
	}
	nv, err := v.size(ctx)
	return nc + nv, err
}

// plan is what a read of one topic covers: its files of [from, to) below the flush markers,
// then the rest of each partition's span from Kafka.
type plan[T rawlog.Row] struct {
	files    rawlog.Files[T]
	from, to time.Time
	tail     map[int32]logread.Span
}

func (s *FilesSource) planClicks(ctx context.Context, from, to time.Time) (plan[rawlog.ClickKey], error) {
	spans, err := s.kafka.clickSpans(ctx, from, to)
	if err != nil {
		return plan[rawlog.ClickKey]{}, err
	}
	return planTopic[rawlog.ClickKey](ctx, s, s.kafka.o.ClicksTopic, from, to, spans)
}

// planVerdicts reads the verdict files from the hour of since - Early on: whole hours, so the
// footers' row counts are what the read finds (older verdicts are allowed).
func (s *FilesSource) planVerdicts(ctx context.Context, since time.Time) (plan[rawlog.FraudVerdictRow], error) {
	spans, err := s.kafka.verdictSpans(ctx, since)
	if err != nil {
		return plan[rawlog.FraudVerdictRow]{}, err
	}
	topic := s.kafka.o.VerdictsTopic
	_, end, err := rawlog.Days(ctx, s.store, topic)
	if err != nil {
		return plan[rawlog.FraudVerdictRow]{}, err
	}
	from := since.Add(-s.kafka.o.Early).Truncate(time.Hour)
	if end.Before(from) {
		end = from
	}
	return planTopic[rawlog.FraudVerdictRow](ctx, s, topic, from, end, spans)
}

func planTopic[T rawlog.Row](ctx context.Context, s *FilesSource, topic string, from, to time.Time, spans map[int32]logread.Span) (plan[T], error) {
	complete, err := rawlog.Complete(ctx, s.store, topic, func() (map[int32]int64, error) {
		cl, err := kgo.NewClient(append(kafka.ClientOptions(s.kafka.o.Brokers, "tally-batchjob-clicks", s.kafka.o.Logger, nil), s.kafka.o.Dial...)...)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		return kafka.GroupOffsets(ctx, cl, s.group, topic)
	})
	if err != nil {
		return plan[T]{}, err
	}
	tail, err := tailSpans(topic, spans, complete)
	if err != nil {
		return plan[T]{}, err
	}
	return plan[T]{files: rawlog.Files[T]{Store: s.store, Topic: topic, Below: complete}, from: from, to: to, tail: tail}, nil
}

// size is how many records the read covers.
func (pl plan[T]) size(ctx context.Context) (int64, error) {
	n, err := pl.files.Rows(ctx, pl.from, pl.to)
	return n + logread.Records(pl.tail), err
}

// read reads the files, passing their rows to rows, then the tail, passing its records to dec.
func (pl plan[T]) read(ctx context.Context, s *FilesSource, rows func(int32, []T) error, dec func([]*kgo.Record, *logread.Stats) error) (logread.Stats, error) {
	var st logread.Stats
	topic := pl.files.Topic
	if err := pl.files.Read(ctx, pl.from, pl.to, func(p int32, rs []T) error { st.Records += int64(len(rs)); return rows(p, rs) }); err != nil {
		return st, fmt.Errorf("read %s files: %w", topic, err)
	}
	ks, err := s.kafka.read(ctx, topic, pl.tail, dec)
	if ks.Records > 0 {
		s.tail = true
	}
	st.Records += ks.Records
	st.Undecodable += ks.Undecodable
	return st, err
}

// tailSpans cuts each partition's span to what the files do not hold: from the partition's
// complete offset (0 without a marker) on. It fails if records below the Kafka log's start are
// in no file and may be wanted.
func tailSpans(topic string, spans map[int32]logread.Span, complete map[int32]int64) (map[int32]logread.Span, error) {
	out := make(map[int32]logread.Span, len(spans))
	for p, sp := range spans {
		c := complete[p]
		if c < sp.Start && !sp.TimeCut {
			return nil, fmt.Errorf("%s partition %d: the sink's files end at offset %d but Kafka starts at %d: records %d to %d are in neither; refusing to count from a gap",
				topic, p, c, sp.Start, c, sp.Start-1)
		}
		sp.From = max(sp.From, c)
		out[p] = sp
	}
	return out, nil
}
