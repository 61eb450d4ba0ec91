package clicks

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// KafkaOptions configure a KafkaSource.
type KafkaOptions struct {
	Brokers       []string
	Dial          []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options
	ClicksTopic   string
	VerdictsTopic string
	// Early and Late bound a click's produce time (the record's timestamp) around its event
	// time: a click stamped t was produced in [t-Early, t+Late). The collector's future and
	// late bounds plus clock skew between hosts; they let a run read only the stretch of the
	// log that can hold its range instead of the whole retention.
	Early, Late time.Duration
	Logger      *slog.Logger
}

// KafkaSource reads the clicks and verdicts topics. Each read snapshots the topics' end
// offsets first and reads up to them, with read_committed isolation; the topics are written
// without transactions, so a partition's last record sits right below its end offset.
type KafkaSource struct{ o KafkaOptions }

// NewKafkaSource returns a source reading the topics o names.
func NewKafkaSource(o KafkaOptions) *KafkaSource { return &KafkaSource{o: o} }

// Name implements Source.
func (s *KafkaSource) Name() string { return "kafka" }

// Clicks implements Source.
func (s *KafkaSource) Clicks(ctx context.Context, from, to time.Time, fn func(int64, []Click) error) (ReadStats, error) {
	spans, err := s.clickSpans(ctx, from, to)
	if err != nil {
		return ReadStats{}, err
	}
	return s.read(ctx, s.o.ClicksTopic, spans, clickDecoder(from, to, fn))
}

// Verdicts implements Source: every verdict produced since the earliest time a click stamped
// since could have been produced, up to the end of the log.
func (s *KafkaSource) Verdicts(ctx context.Context, since time.Time, fn func(int64, []Verdict) error) (ReadStats, error) {
	spans, err := s.verdictSpans(ctx, since)
	if err != nil {
		return ReadStats{}, err
	}
	return s.read(ctx, s.o.VerdictsTopic, spans, verdictDecoder(fn))
}

// Size implements Source: the offsets of the spans the reads would cover.
func (s *KafkaSource) Size(ctx context.Context, from, to time.Time) (int64, error) {
	cs, err := s.clickSpans(ctx, from, to)
	if err != nil {
		return 0, err
	}
	vs, err := s.verdictSpans(ctx, from)
	if err != nil {
		return 0, err
	}
	return spanRecords(cs) + spanRecords(vs), nil
}

// spanRecords is how many records a read of spans covers.
func spanRecords(spans map[int32]span) int64 {
	var n int64
	for _, sp := range spans {
		n += max(0, sp.Stop-sp.From)
	}
	return n
}

// clickSpans are the offsets of the clicks topic that can hold clicks stamped in [from, to).
func (s *KafkaSource) clickSpans(ctx context.Context, from, to time.Time) (map[int32]span, error) {
	return s.spans(ctx, s.o.ClicksTopic, from.Add(-s.o.Early).UnixMilli(), to.Add(s.o.Late).UnixMilli())
}

// verdictSpans are the offsets of the verdicts topic that can hold verdicts on clicks stamped
// since or later.
func (s *KafkaSource) verdictSpans(ctx context.Context, since time.Time) (map[int32]span, error) {
	return s.spans(ctx, s.o.VerdictsTopic, since.Add(-s.o.Early).UnixMilli(), -1)
}

// clickDecoder passes on the decodable clicks stamped in [from, to).
func clickDecoder(from, to time.Time, fn func(int64, []Click) error) func([]*kgo.Record, *ReadStats) error {
	fromMs, toMs := from.UnixMilli(), to.UnixMilli()
	var batch []Click
	return func(recs []*kgo.Record, st *ReadStats) error {
		batch = batch[:0]
		for _, r := range recs {
			c, err := schemas.DecodeClick(r.Value)
			if err != nil {
				st.Undecodable++
				continue
			}
			if c.TS < fromMs || c.TS >= toMs {
				continue
			}
			batch = append(batch, Click{ClickID: c.ClickID, AdID: c.AdID, TS: c.TS, FraudScore: c.FraudScore,
				HasFraudScore: c.HasFraudScore, Partition: r.Partition, Offset: r.Offset})
		}
		return fn(int64(len(recs)), batch)
	}
}

// verdictDecoder passes on the decodable verdicts.
func verdictDecoder(fn func(int64, []Verdict) error) func([]*kgo.Record, *ReadStats) error {
	var batch []Verdict
	return func(recs []*kgo.Record, st *ReadStats) error {
		batch = batch[:0]
		for _, r := range recs {
			v, err := schemas.DecodeFraudVerdict(r.Value)
			if err != nil {
				st.Undecodable++
				continue
			}
			batch = append(batch, Verdict{ClickID: v.ClickID, Fraud: v.Verdict == schemas.VerdictFraud, Reason: v.Reason,
				DecidedAt: v.DecidedAt, Partition: r.Partition, Offset: r.Offset})
		}
		return fn(int64(len(recs)), batch)
	}
}

// read calls fn with the records of topic in each partition's span [From, Stop). Progress is
// logged every 2 s.
func (s *KafkaSource) read(ctx context.Context, topic string, spans map[int32]span, fn func([]*kgo.Record, *ReadStats) error) (ReadStats, error) {
	var st ReadStats
	want := map[int32]kgo.Offset{}
	stop := map[int32]int64{}
	total := spanRecords(spans)
	for p, r := range spans {
		if r.Stop > r.From {
			want[p] = kgo.NewOffset().At(r.From)
			stop[p] = r.Stop
		}
	}
	if len(want) == 0 {
		return st, nil
	}
	cl, err := kgo.NewClient(append(append(kafka.ClientOptions(s.o.Brokers, "tally-batchjob-clicks", s.o.Logger, nil), s.o.Dial...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxBytes(64<<20),
	)...)
	if err != nil {
		return st, fmt.Errorf("create reader of %s: %w", topic, err)
	}
	defer cl.Close()

	t0, lastLog := time.Now(), time.Now()
	var recs []*kgo.Record
	for len(stop) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("read %s: %w", topic, err)
		}
		fetches.EachError(func(t string, p int32, err error) {
			s.o.Logger.Warn("fetch error; retrying", "topic", t, "partition", p, "err", err)
		})
		recs = recs[:0]
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			end, ok := stop[ftp.Partition]
			if !ok {
				return
			}
			for _, r := range ftp.Records {
				if r.Offset >= end {
					delete(stop, ftp.Partition)
					break
				}
				st.Records++
				recs = append(recs, r)
				if r.Offset+1 >= end {
					delete(stop, ftp.Partition)
					break
				}
			}
		})
		if err := fn(recs, &st); err != nil {
			return st, err
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			took := time.Since(t0)
			s.o.Logger.Info("reading log", "topic", topic, "read", st.Records, "of", total, "partitions_left", len(stop),
				"per_second", int64(float64(st.Records)/took.Seconds()), "took", took.Round(time.Millisecond))
		}
	}
	if st.Undecodable > 0 {
		s.o.Logger.Warn("log holds undecodable records; skipped", "topic", topic, "count", st.Undecodable)
	}
	return st, nil
}

// span is the stretch [From, Stop) of a partition a read covers. Start is the log's first
// offset; TimeCut says From was found by time (the records below it were produced before the
// read's start time), so records missing below Start were not wanted anyway.
type span struct {
	Start, From, Stop int64
	TimeCut           bool
}

// spans returns, per partition of topic, the offsets to read: from the first record produced at
// or after fromMs (or the log start) to the first produced at or after toMs (toMs < 0: the end
// offset now). End offsets are read first, so the spans are a snapshot. A topic that does not
// exist yet is an empty log.
func (s *KafkaSource) spans(ctx context.Context, topic string, fromMs, toMs int64) (map[int32]span, error) {
	cl, err := kgo.NewClient(append(kafka.ClientOptions(s.o.Brokers, "tally-batchjob-clicks", s.o.Logger, nil), s.o.Dial...)...)
	if err != nil {
		return nil, fmt.Errorf("create admin client for %s: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := kafka.PartitionOffsets(topic, "end", func() (kadm.ListedOffsets, error) { return adm.ListCommittedOffsets(ctx, topic) })
	if err != nil {
		return nil, err
	}
	starts, err := kafka.PartitionOffsets(topic, "start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	if err != nil {
		return nil, err
	}
	firsts, err := kafka.PartitionOffsets(topic, "first-after-time", func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, fromMs, topic) })
	if err != nil {
		return nil, err
	}
	lasts := ends
	if toMs >= 0 {
		if lasts, err = kafka.PartitionOffsets(topic, "stop-time", func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, toMs, topic) }); err != nil {
			return nil, err
		}
	}
	out := map[int32]span{}
	for p, end := range ends {
		sp := span{Start: starts[p], From: starts[p], Stop: end}
		switch f, ok := firsts[p]; {
		case ok && f < 0 && end > sp.Start: // every record kept was produced before fromMs
			sp.From, sp.TimeCut = end, true
		case ok && f > sp.Start:
			sp.From, sp.TimeCut = f, true
		}
		if l, ok := lasts[p]; ok && l >= 0 {
			sp.Stop = min(sp.Stop, l)
		}
		out[p] = sp
	}
	return out, nil
}
