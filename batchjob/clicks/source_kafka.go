package clicks

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/logread"
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
type KafkaSource struct {
	o   KafkaOptions
	log logread.Reader
}

// NewKafkaSource returns a source reading the topics o names.
func NewKafkaSource(o KafkaOptions) *KafkaSource {
	return &KafkaSource{o: o, log: logread.Reader{Brokers: o.Brokers, Dial: o.Dial, Client: "tally-batchjob-clicks", Logger: o.Logger}}
}

// Name implements Source.
func (s *KafkaSource) Name() string { return "kafka" }

// Clicks implements Source.
func (s *KafkaSource) Clicks(ctx context.Context, from, to time.Time, fn func(int64, []Click) error) (logread.Stats, error) {
	spans, err := s.clickSpans(ctx, from, to)
	if err != nil {
		return logread.Stats{}, err
	}
	return s.read(ctx, s.o.ClicksTopic, spans, clickDecoder(from, to, fn))
}

// Verdicts implements Source: every verdict produced since the earliest time a click stamped
// since could have been produced, up to the end of the log.
func (s *KafkaSource) Verdicts(ctx context.Context, since time.Time, fn func(int64, []Verdict) error) (logread.Stats, error) {
	spans, err := s.verdictSpans(ctx, since)
	if err != nil {
		return logread.Stats{}, err
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
	return logread.Records(cs) + logread.Records(vs), nil
}

// clickSpans are the offsets of the clicks topic that can hold clicks stamped in [from, to).
func (s *KafkaSource) clickSpans(ctx context.Context, from, to time.Time) (map[int32]logread.Span, error) {
	return s.log.Spans(ctx, s.o.ClicksTopic, from.Add(-s.o.Early).UnixMilli(), to.Add(s.o.Late).UnixMilli())
}

// verdictSpans are the offsets of the verdicts topic that can hold verdicts on clicks stamped
// since or later.
func (s *KafkaSource) verdictSpans(ctx context.Context, since time.Time) (map[int32]logread.Span, error) {
	return s.log.Spans(ctx, s.o.VerdictsTopic, since.Add(-s.o.Early).UnixMilli(), -1)
}

// clickDecoder passes on the decodable clicks stamped in [from, to).
func clickDecoder(from, to time.Time, fn func(int64, []Click) error) func([]*kgo.Record, *logread.Stats) error {
	fromMs, toMs := from.UnixMilli(), to.UnixMilli()
	var batch []Click
	return func(recs []*kgo.Record, st *logread.Stats) error {
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
			batch = append(batch, Click{ClickID: c.ClickID, AdID: c.AdID, CampaignID: c.CampaignID, Device: c.Device, TS: c.TS, FraudScore: c.FraudScore,
				HasFraudScore: c.HasFraudScore, Partition: r.Partition, Offset: r.Offset})
		}
		return fn(int64(len(recs)), batch)
	}
}

// verdictDecoder passes on the decodable verdicts.
func verdictDecoder(fn func(int64, []Verdict) error) func([]*kgo.Record, *logread.Stats) error {
	var batch []Verdict
	return func(recs []*kgo.Record, st *logread.Stats) error {
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

// read passes the records of topic in spans to dec, which counts the undecodable ones.
func (s *KafkaSource) read(ctx context.Context, topic string, spans map[int32]logread.Span, dec func([]*kgo.Record, *logread.Stats) error) (logread.Stats, error) {
	var st logread.Stats
	n, err := s.log.Read(ctx, topic, spans, func(recs []*kgo.Record) error { return dec(recs, &st) })
	st.Records = n
	if err != nil {
		return st, err
	}
	if st.Undecodable > 0 {
		s.o.Logger.Warn("log holds undecodable records; skipped", "topic", topic, "count", st.Undecodable)
	}
	return st, nil
}
