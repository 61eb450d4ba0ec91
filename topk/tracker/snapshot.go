package tracker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/topk/approx"
)

// Snapshot file layout (all integers varints): magic, version, then the offsets, the guards,
// and per kind the exact windows' bucket counts and the 24h summaries, each list ended by a 0
// marker; a CRC-32 (Castagnoli) of everything before it closes the file. Window totals are not
// saved: they are rebuilt from the bucket counts for the clock at load time, so buckets that
// left a window while topk was down are dropped on load.

const (
	magic           = "TOPKSNAP"
	snapshotVersion = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Save writes the state to path atomically: a temporary file, synced, renamed over path, and
// the directory synced, so a crash leaves the previous snapshot or this one, never a mix.
func (t *Tracker) Save(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save topk snapshot: %w", err)
	}
	f, err := os.CreateTemp(dir, ".snapshot-*")
	if err != nil {
		return fmt.Errorf("save topk snapshot: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := t.write(f); err != nil {
		return fmt.Errorf("save topk snapshot: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("save topk snapshot: sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save topk snapshot: close: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("save topk snapshot: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("save topk snapshot: open directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("save topk snapshot: sync directory: %w", err)
	}
	return nil
}

type writer struct {
	w   *bufio.Writer
	crc uint32
	buf []byte
}

func (w *writer) flush() {
	w.crc = crc32.Update(w.crc, crcTable, w.buf)
	w.w.Write(w.buf) // a bufio.Writer error sticks and returns from Flush
	w.buf = w.buf[:0]
}

func (w *writer) u(v uint64) {
	w.buf = binary.AppendUvarint(w.buf, v)
	if len(w.buf) > 4096 {
		w.flush()
	}
}
func (w *writer) i(v int64) { w.buf = binary.AppendVarint(w.buf, v) }
func (w *writer) s(v string) {
	w.u(uint64(len(v)))
	w.buf = append(w.buf, v...)
}

func (t *Tracker) write(f io.Writer) error {
	w := &writer{w: bufio.NewWriterSize(f, 1<<20)}
	w.buf = append(w.buf, magic...)
	w.u(snapshotVersion)
	t.mu.Lock()
	w.u(uint64(len(t.offsets)))
	for p, o := range t.offsets {
		w.u(uint64(p))
		w.i(o)
	}
	w.u(uint64(len(t.guards)))
	for src, g := range t.guards {
		w.u(uint64(src.kind))
		w.u(uint64(src.partition))
		w.u(g.Epoch)
		w.i(g.End)
		w.u(uint64(g.Chunk))
	}
	t.mu.Unlock()
	for _, k := range schemas.CountKinds {
		ks := t.kinds[k]
		ks.exact.Each(func(win int, start int64, key string, n uint64) {
			w.u(1)
			w.u(uint64(win))
			w.i(start)
			w.s(key)
			w.u(n)
		})
		w.u(0)
		ks.day.Each(func(start int64, total uint64, cs []approx.Counter) {
			w.u(1)
			w.i(start)
			w.u(total)
			w.u(uint64(len(cs)))
			for _, c := range cs {
				w.s(c.Key)
				w.u(c.Count)
				w.u(c.Err)
			}
		})
		w.u(0)
	}
	w.flush()
	w.buf = binary.BigEndian.AppendUint32(w.buf, w.crc)
	w.w.Write(w.buf)
	return w.w.Flush()
}

// Load reads the snapshot at path into a new tracker whose windows end at now. A missing file
// returns (nil, nil): a first start.
func Load(path string, o Options, now time.Time) (*Tracker, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load topk snapshot: %w", err)
	}
	t := New(o, now)
	if err := t.read(b); err != nil {
		return nil, fmt.Errorf("load topk snapshot %s: %w", path, err)
	}
	return t, nil
}

// reader reads fields from b; the first failure sticks in err and zeroes every later read.
type reader struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated")

func (r *reader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) i() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errTruncated
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) s() string {
	n := r.u()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errTruncated
		return ""
	}
	v := string(r.b[:n])
	r.b = r.b[n:]
	return v
}

func (t *Tracker) read(b []byte) error {
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return errors.New("not a topk snapshot")
	}
	body := b[:len(b)-4]
	if got, want := binary.BigEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, crcTable); got != want {
		return fmt.Errorf("checksum %08x; want %08x (the file is damaged)", got, want)
	}
	r := &reader{b: body[len(magic):]}
	if v := r.u(); v != snapshotVersion {
		return fmt.Errorf("snapshot version %d; this topk reads %d", v, snapshotVersion)
	}
	for n := r.u(); n > 0 && r.err == nil; n-- {
		p := int32(r.u())
		t.offsets[p] = r.i()
	}
	for n := r.u(); n > 0 && r.err == nil; n-- {
		src := source{schemas.CountKind(r.u()), int32(r.u())}
		t.guards[src] = Guard{Epoch: r.u(), End: r.i(), Chunk: uint32(r.u())}
	}
	for _, k := range schemas.CountKinds {
		ks := t.kinds[k]
		nw := uint64(len(ks.exact.Specs()))
		for r.u() == 1 && r.err == nil {
			w, start, key, n := r.u(), r.i(), r.s(), r.u()
			if r.err == nil && w < nw {
				ks.exact.AddBucket(int(w), start, key, n)
			}
		}
		for r.u() == 1 && r.err == nil {
			start, total, n := r.i(), r.u(), r.u()
			if n > uint64(len(r.b)) {
				return fmt.Errorf("summary of %d counters in %d bytes", n, len(r.b))
			}
			cs := make([]approx.Counter, 0, n)
			for ; n > 0 && r.err == nil; n-- {
				cs = append(cs, approx.Counter{Key: r.s(), Count: r.u(), Err: r.u()})
			}
			ks.day.Restore(start, total, cs)
		}
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return nil
}
