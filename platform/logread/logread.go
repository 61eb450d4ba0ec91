// Package logread reads stretches of a Kafka topic up to a snapshot of its end offsets, for the
// readers that replay a log rather than follow it (the like log's rebuilds, the nightly jobs):
// Offsets snapshots each partition's start and end, Spans finds the stretch that can hold the
// records produced between two times, and Read hands the records of spans to a callback, each
// partition's in log order, with read_committed isolation. The topics are written without
// transactions, so a partition's last record sits right below its end offset and a read knows
// when it is done.
//
// Concurrency and lifecycle: a Reader holds only settings; each call makes its own Kafka client
// and closes it before returning. Calls may run at once.
package logread

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// Reader reads topics of one cluster.
type Reader struct {
	Brokers []string
	Dial    []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options
	Client  string    // the client id the brokers see
	Logger  *slog.Logger
}

// Stats says what a read of the log covered, for readers that decode what Read hands them.
type Stats struct {
	Records     int64 // records read, decodable or not
	Undecodable int64 // records skipped because they could not be decoded
}

// Span is the stretch [From, Stop) of a partition a read covers. Start is the log's first
// offset; TimeCut says From was found by time (the records below it were produced before the
// read's start time), so records missing below Start were not wanted anyway.
type Span struct {
	Start, From, Stop int64
	TimeCut           bool
}

// Records is how many records a read of spans covers.
func Records(spans map[int32]Span) int64 {
	var n int64
	for _, sp := range spans {
		n += max(0, sp.Stop-sp.From)
	}
	return n
}

// Offsets snapshots the start and the read_committed end offset of every partition of topic. A
// topic that does not exist yet is an empty log.
func (r Reader) Offsets(ctx context.Context, topic string) (starts, ends map[int32]int64, err error) {
	err = r.admin(ctx, topic, func(adm *kadm.Client) error {
		starts, ends, err = offsets(ctx, adm, topic)
		return err
	})
	return starts, ends, err
}

func offsets(ctx context.Context, adm *kadm.Client, topic string) (starts, ends map[int32]int64, err error) {
	ends, err = kafka.PartitionOffsets(topic, "end", func() (kadm.ListedOffsets, error) { return adm.ListCommittedOffsets(ctx, topic) })
	if err != nil {
		return nil, nil, err
	}
	starts, err = kafka.PartitionOffsets(topic, "start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	if err != nil {
		return nil, nil, err
	}
	return starts, ends, nil
}

// admin runs fn with an admin client of its own.
func (r Reader) admin(ctx context.Context, topic string, fn func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(append(kafka.ClientOptions(r.Brokers, r.Client, r.Logger, nil), r.Dial...)...)
	if err != nil {
		return fmt.Errorf("create admin client for %s: %w", topic, err)
	}
	defer cl.Close()
	return fn(kadm.NewClient(cl))
}

// Spans returns, per partition of topic, the offsets to read: from the first record produced at
// or after fromMs (or the log start) to the first produced at or after toMs (toMs < 0: the end
// offset now). End offsets are read first, so the spans are a snapshot. A topic that does not
// exist yet is an empty log.
func (r Reader) Spans(ctx context.Context, topic string, fromMs, toMs int64) (map[int32]Span, error) {
	out := map[int32]Span{}
	err := r.admin(ctx, topic, func(adm *kadm.Client) error {
		starts, ends, err := offsets(ctx, adm, topic)
		if err != nil {
			return err
		}
		firsts, err := kafka.PartitionOffsets(topic, "first-after-time", func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, fromMs, topic) })
		if err != nil {
			return err
		}
		lasts := ends
		if toMs >= 0 {
			if lasts, err = kafka.PartitionOffsets(topic, "stop-time", func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, toMs, topic) }); err != nil {
				return err
			}
		}
		for p, end := range ends {
			sp := Span{Start: starts[p], From: starts[p], Stop: end}
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
		return nil
	})
	return out, err
}

// Read calls fn with the records of topic in each partition's span [From, Stop), each
// partition's in log order, and returns how many it read. Progress is logged every 2 s.
func (r Reader) Read(ctx context.Context, topic string, spans map[int32]Span, fn func([]*kgo.Record) error) (int64, error) {
	var read int64
	want := map[int32]kgo.Offset{}
	stop := map[int32]int64{}
	total := Records(spans)
	for p, sp := range spans {
		if sp.Stop > sp.From {
			want[p] = kgo.NewOffset().At(sp.From)
			stop[p] = sp.Stop
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(append(append(kafka.ClientOptions(r.Brokers, r.Client, r.Logger, nil), r.Dial...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxBytes(64<<20),
	)...)
	if err != nil {
		return 0, fmt.Errorf("create reader of %s: %w", topic, err)
	}
	defer cl.Close()

	t0, lastLog := time.Now(), time.Now()
	var recs []*kgo.Record
	for len(stop) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return read, fmt.Errorf("read %s: %w", topic, err)
		}
		fetches.EachError(func(t string, p int32, err error) {
			r.Logger.Warn("fetch error; retrying", "topic", t, "partition", p, "err", err)
		})
		recs = recs[:0]
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			end, ok := stop[ftp.Partition]
			if !ok {
				return
			}
			for _, rec := range ftp.Records {
				if rec.Offset >= end {
					delete(stop, ftp.Partition)
					break
				}
				read++
				recs = append(recs, rec)
				if rec.Offset+1 >= end {
					delete(stop, ftp.Partition)
					break
				}
			}
		})
		if err := fn(recs); err != nil {
			return read, err
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			took := time.Since(t0)
			r.Logger.Info("reading log", "topic", topic, "read", read, "of", total, "partitions_left", len(stop),
				"per_second", int64(float64(read)/took.Seconds()), "took", took.Round(time.Millisecond))
		}
	}
	return read, nil
}
