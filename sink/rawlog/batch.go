package rawlog

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tallypipeline/tally/sink/store"
)

// OpenHour creates the file that will hold a flush's rows of one hour.
type OpenHour func(hour time.Time) (io.Writer, error)

// Batch is one flush of one topic partition: records go in, in offset order, and are written as
// they come into one Parquet file per event hour.
type Batch interface {
	// Add decodes a record and writes it to its hour's file. An error means the record did not
	// decode (it is in no file) or the file could not be written (see IsWriteError).
	Add(partition int32, offset int64, value []byte) error
	// Bytes is the decoded size of the rows added (the size bound counts it).
	Bytes() int64
	// Rows is how many rows were added.
	Rows() int
	// Close finishes every hour's file and returns the hours with their row counts. The files
	// themselves are closed (committed or aborted) by their opener.
	Close() (map[time.Time]int, error)
}

// WriteError is a failure to write a file, as opposed to a record that did not decode.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// rowsPerGroup bounds a row group, so a writer holds at most this many rows' pages in memory
// and readers can split a large file.
const rowsPerGroup = 256 << 10

// chunk is how many decoded rows are handed to the Parquet writer at once.
const chunk = 1024

func define[T Row](name string, retention time.Duration, decode func(int32, int64, []byte) (T, int, error), opts []parquet.WriterOption) Topic {
	return Topic{Name: name, Retention: retention, NewBatch: func(open OpenHour) Batch {
		return &batch[T]{decode: decode, open: open, opts: opts, hours: map[time.Time]*hourFile[T]{}}
	}}
}

// writerOptions are the Parquet settings of every file: zstd at its fastest level (a third
// of the size of the fastest codecs at a fraction of the cost of stronger levels) through
// codec, bounded row groups.
func writerOptions(codec *pageCodec) []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(codec),
		parquet.MaxRowsPerRowGroup(rowsPerGroup),
		parquet.CreatedBy("tally sink", "1", ""),
	}
}

type batch[T Row] struct {
	decode func(int32, int64, []byte) (T, int, error)
	open   OpenHour
	opts   []parquet.WriterOption
	hours  map[time.Time]*hourFile[T]
	bytes  int64
	rows   int
}

type hourFile[T Row] struct {
	w    *parquet.GenericWriter[T]
	buf  []T
	rows int
}

func (b *batch[T]) Add(p int32, off int64, value []byte) error {
	row, size, err := b.decode(p, off, value)
	if err != nil {
		return err
	}
	hour := HourOf(row.EventTS())
	f := b.hours[hour]
	if f == nil {
		w, err := b.open(hour)
		if err != nil {
			return &WriteError{fmt.Errorf("open file of hour %s: %w", hour.Format(time.RFC3339), err)}
		}
		f = &hourFile[T]{w: parquet.NewGenericWriter[T](w, b.opts...), buf: make([]T, 0, chunk)}
		b.hours[hour] = f
	}
	f.buf = append(f.buf, row)
	f.rows++
	b.rows++
	b.bytes += int64(size)
	if len(f.buf) == chunk {
		return f.drain()
	}
	return nil
}

func (f *hourFile[T]) drain() error {
	if len(f.buf) == 0 {
		return nil
	}
	if _, err := f.w.Write(f.buf); err != nil {
		return &WriteError{fmt.Errorf("write parquet rows: %w", err)}
	}
	clear(f.buf)
	f.buf = f.buf[:0]
	return nil
}

func (b *batch[T]) Bytes() int64 { return b.bytes }
func (b *batch[T]) Rows() int    { return b.rows }

func (b *batch[T]) Close() (map[time.Time]int, error) {
	out := make(map[time.Time]int, len(b.hours))
	hours := make([]time.Time, 0, len(b.hours))
	for h := range b.hours {
		hours = append(hours, h)
	}
	slices.SortFunc(hours, func(a, b time.Time) int { return a.Compare(b) })
	for _, h := range hours {
		f := b.hours[h]
		if err := f.drain(); err != nil {
			return nil, err
		}
		if err := f.w.Close(); err != nil {
			return nil, &WriteError{fmt.Errorf("finish parquet file of hour %s: %w", h.Format(time.RFC3339), err)}
		}
		out[h] = f.rows
	}
	return out, nil
}

// WriteFlush writes records (value i at offset first+i) of one partition as one flush into st,
// writing the partition's marker first and committing each hour's file at once, as the sink
// does: for tools and tests that make sink files without Kafka. Undecodable records are left
// out, as the sink leaves them out.
func WriteFlush(st store.Store, topic Topic, partition int32, first int64, values [][]byte) error {
	last := first + int64(len(values)) - 1
	if err := WriteMarker(st, topic.Name, partition, Marker{First: first, Last: last}); err != nil {
		return err
	}
	files := map[time.Time]store.File{}
	abort := func() {
		for _, f := range files {
			f.Abort()
		}
	}
	b := topic.NewBatch(func(hour time.Time) (io.Writer, error) {
		f, err := st.Create(HourPrefix(topic.Name, hour))
		if err != nil {
			return nil, err
		}
		files[hour] = f
		return f, nil
	})
	for i, v := range values {
		var we *WriteError
		if err := b.Add(partition, first+int64(i), v); errors.As(err, &we) {
			abort()
			return err
		}
	}
	if _, err := b.Close(); err != nil {
		abort()
		return err
	}
	for h, f := range files {
		if err := f.Commit(FileName(topic.Name, h, partition, first, last)); err != nil {
			abort()
			return err
		}
	}
	return nil
}
