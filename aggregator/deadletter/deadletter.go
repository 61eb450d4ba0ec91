// Package deadletter writes data a reader sets aside instead of counting (a Kafka record that
// does not decode or validate, a stored row that does not read back) to the dead_letters table
// (schemas/migrations/005_dead_letters.sql), and logs and counts each row written, so that
// nothing is skipped without a trace an operator or an auditor can find.
//
// Exactly-once: the table is a ReplacingMergeTree keyed by (source, partition, offset, ref), and
// a reader decides to set a record aside from its bytes alone, so a replay after a crash writes
// the same letters again and FINAL keeps one row each. A caller writes a batch's letters before
// the batch's checkpoint, so a crash in between replays them rather than losing them. Write
// gives a letter written again the seen_at of its first write: the row is then the same in every
// column, and a listing by the day a record was set aside does not move it to the replay's day.
// (Two writers racing on one record, a fenced former owner and the new one, may each write their
// own seen_at; FINAL keeps the later. The row is there once either way.)
//
// Concurrency: a Writer is safe for concurrent use and starts no goroutine.
package deadletter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/platform/chclient"
)

// MaxPayload bounds the bytes of a bad record or row kept in its letter.
const MaxPayload = 64 << 10

// Letter is one piece of data set aside.
type Letter struct {
	Source    string // topic or table
	Partition int32  // -1 for a table row
	Offset    int64  // record offset, or the row's version
	Ref       string // a record's key, or what a table row belonged to
	Reason    string
	Payload   []byte // at most MaxPayload bytes
}

// OfRecord is the letter of the Kafka record at topic/partition/offset, refused for err: its ref
// is the record's key, its payload a copy of the value's first MaxPayload bytes (a copy, so that
// a batch holding letters does not keep whole fetched records alive).
func OfRecord(topic string, partition int32, offset int64, key, value []byte, err error) Letter {
	return Letter{Source: topic, Partition: partition, Offset: offset, Ref: string(key), Reason: err.Error(),
		Payload: bytes.Clone(value[:min(len(value), MaxPayload)])}
}

// Writer writes letters through one connection's database and reports them.
type Writer struct {
	now     func() time.Time
	logger  *slog.Logger
	written *prometheus.CounterVec
}

// New returns a Writer that counts the rows it writes, by source, in tally_dead_letters_total,
// registered in reg. Every stream's Writer of a process shares that one counter: a second New
// on the same registry counts into the first one's. The series of sources, those the caller
// may write, start at zero: an alert on the counter's increase sees the first letter of a
// process, which it would miss on a series born at one.
func New(now func() time.Time, logger *slog.Logger, reg prometheus.Registerer, sources ...string) *Writer {
	written := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_dead_letters_total",
		Help: "Records or rows set aside in the dead_letters table, by source (a replay writes its batch's again)."}, []string{"source"})
	if err := reg.Register(written); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			panic(fmt.Sprintf("register tally_dead_letters_total: %v", err)) // a programming error: two different metrics of one name
		}
		written = already.ExistingCollector.(*prometheus.CounterVec)
	}
	for _, src := range sources {
		written.WithLabelValues(src)
	}
	return &Writer{now: now, logger: logger, written: written}
}

// key names a row of dead_letters.
type key struct {
	source    string
	partition int32
	offset    int64
	ref       string
}

// Write inserts letters in one INSERT, then logs and counts each. A letter already in the table
// (written before a crash, or by an attempt whose answer was lost) is written again with its
// first seen_at; the others get now.
func (w *Writer) Write(ctx context.Context, conn driver.Conn, letters []Letter) error {
	if len(letters) == 0 {
		return nil
	}
	first, err := w.seen(ctx, conn, letters)
	if err != nil {
		return err
	}
	now := w.now()
	const insert = "INSERT INTO dead_letters (source, partition, offset, ref, reason, payload, seen_at)"
	err = chclient.Insert(ctx, conn, fmt.Sprintf("%d dead letters", len(letters)), insert, func(add func(...any) error) error {
		for _, l := range letters {
			at, ok := first[key{l.Source, l.Partition, l.Offset, l.Ref}]
			if !ok {
				at = now
			}
			if err := add(l.Source, l.Partition, l.Offset, l.Ref, l.Reason, string(l.Payload[:min(len(l.Payload), MaxPayload)]), at); err != nil {
				return fmt.Errorf("the letter of %s %d/%d: %w", l.Source, l.Partition, l.Offset, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range letters {
		w.written.WithLabelValues(l.Source).Inc()
		w.logger.Warn("set aside in dead_letters", "source", l.Source, "partition", l.Partition, "offset", l.Offset,
			"ref", l.Ref, "reason", l.Reason, "bytes", len(l.Payload))
	}
	return nil
}

// seen returns the earliest seen_at of each of letters already in the table. One statement
// reads the offset span of each (source, partition) the letters come from (the key's leading
// columns, so an index range each); rows in a span that are not among letters are ignored.
func (w *Writer) seen(ctx context.Context, conn driver.Conn, letters []Letter) (map[key]time.Time, error) {
	type span struct{ lo, hi int64 }
	type group struct {
		source    string
		partition int32
	}
	spans := map[group]span{}
	var order []group
	for _, l := range letters {
		g := group{l.Source, l.Partition}
		s, ok := spans[g]
		if !ok {
			order = append(order, g)
			s = span{l.Offset, l.Offset}
		}
		spans[g] = span{min(s.lo, l.Offset), max(s.hi, l.Offset)}
	}
	terms := make([]string, len(order))
	var args []any
	for i, g := range order {
		terms[i] = "(source = ? AND partition = ? AND offset BETWEEN ? AND ?)"
		args = append(args, g.source, g.partition, spans[g].lo, spans[g].hi)
	}
	out := map[key]time.Time{}
	err := chclient.Each(ctx, conn, `SELECT source, partition, offset, ref, min(seen_at) FROM dead_letters
		WHERE `+strings.Join(terms, " OR ")+` GROUP BY source, partition, offset, ref`, args, func(rows driver.Rows) error {
		var k key
		var at time.Time
		if err := rows.Scan(&k.source, &k.partition, &k.offset, &k.ref, &at); err != nil {
			return err
		}
		out[k] = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look up %d dead letters written before: %w", len(letters), err)
	}
	return out, nil
}

// SetAside writes the letters the batches hold (letters gives each batch's pending letters)
// through w in one INSERT, run by retry, before the checkpoint that moves past their records: a
// crash before it replays the batches, which refuse the same records and write the same rows
// again. Once written the batches hold none, so a flush retried after a later step failed does
// not write them twice.
func SetAside[B any](ctx context.Context, w *Writer, conn driver.Conn, retry func(ctx context.Context, what string, fn func() error) error,
	batches []B, letters func(B) *[]Letter) error {
	var all []Letter
	for _, b := range batches {
		all = append(all, *letters(b)...)
	}
	if len(all) == 0 {
		return nil
	}
	if err := retry(ctx, "set aside refused records", func() error { return w.Write(ctx, conn, all) }); err != nil {
		return err
	}
	for _, b := range batches {
		*letters(b) = nil
	}
	return nil
}
