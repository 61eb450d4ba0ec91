package kafkabroker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group commit: with Options.SyncWrites a client's write is acknowledged only once it is on
// disk, as with kfake's own SyncWrites, but the fsyncs are shared. kfake's SyncWrites fsyncs a
// partition's segment and index for every batch, inside its one request loop: a produce request
// over 8 partitions held the whole broker for 16 fsyncs, each about 100 µs of CPU here, and every
// other client's request waited behind them. Instead kfake writes to the page cache alone, and
// each connection holds back an answer that acknowledges a write (syncConn) until a round of the
// syncer, started after kfake wrote it, has fsynced the files the request wrote: every answer
// waiting meanwhile shares the next round, whose fsyncs run in parallel.
//
// An answer is written after kfake wrote what it acknowledges, so a round that starts after the
// answer is handed over covers it. What a request wrote: a produce request, the active segment
// and index of each partition it names (produce requests are kept at version 12, whose
// partitions come with their topic's name, as kfake's directories do); a group or producer-id request, groups.log and pids.log;
// any other write (topics, configs, transaction markers), every partition's active files.

// work is what one or more held answers need fsynced.
type work struct {
	parts map[partKey]struct{} // partitions whose active segment and index were appended to
	logs  bool                 // groups.log and pids.log
	all   bool                 // every partition's active files and the logs
}

type partKey struct {
	topic string
	part  int32
}

func (w *work) empty() bool { return len(w.parts) == 0 && !w.logs && !w.all }

func (w *work) merge(o work) {
	w.logs, w.all = w.logs || o.logs, w.all || o.all
	for k := range o.parts {
		if w.parts == nil {
			w.parts = map[partKey]struct{}{}
		}
		w.parts[k] = struct{}{}
	}
}

// errSyncerClosed is what a held answer gets when the broker stops before its round ran.
var errSyncerClosed = errors.New("embedded kafka: closing before the write was synced")

// syncer runs the fsync rounds. wait is safe for concurrent use; one goroutine, started by
// newSyncer and stopped by close, runs the rounds and owns files.
type syncer struct {
	root   string // kfake's data directory
	logger *slog.Logger

	mu       sync.Mutex
	cond     *sync.Cond
	next     work   // what the next round syncs
	started  uint64 // rounds started
	done     uint64 // rounds finished
	failedAt uint64 // the last round that failed to sync a file (0: none)
	closed   bool
	stopped  chan struct{}
	synced   map[string]int64 // each file's size at its last fsync, by path

	files map[partKey]*activeFiles // the round goroutine's open handles

	roundSeconds prometheus.Histogram // how long each round took
	answersHeld  prometheus.Counter   // answers that waited for a round
}

// activeFiles are a partition's active segment and index, opened to fsync them.
type activeFiles struct {
	base     int64 // the segment's base offset, its file name
	seg, idx *os.File
}

// newSyncer starts a syncer of the data directory root; reg, if set, receives its metrics.
func newSyncer(root string, logger *slog.Logger, reg prometheus.Registerer) (*syncer, error) {
	s := &syncer{root: root, logger: logger, stopped: make(chan struct{}), synced: map[string]int64{}, files: map[partKey]*activeFiles{},
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_embedded_kafka_fsync_round_seconds",
			Help:    "How long a round of the embedded broker's fsyncs took; the answers acknowledging writes wait for one.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}),
		answersHeld: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_embedded_kafka_answers_held_total",
			Help: "Answers acknowledging a write that waited for an fsync round."}),
	}
	if reg != nil {
		if err := errors.Join(reg.Register(s.roundSeconds), reg.Register(s.answersHeld)); err != nil {
			return nil, fmt.Errorf("embedded kafka: register the fsync metrics: %w", err)
		}
	}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s, nil
}

// wait returns once a round started after the call has fsynced what w names.
func (s *syncer) wait(w work) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errSyncerClosed
	}
	s.next.merge(w)
	target := s.started + 1
	s.cond.Broadcast()
	for s.done < target && !s.closed {
		s.cond.Wait()
	}
	switch {
	case s.done < target:
		return errSyncerClosed
	case s.failedAt >= target:
		return fmt.Errorf("embedded kafka: fsync round %d failed", s.failedAt)
	}
	return nil
}

func (s *syncer) run() {
	defer close(s.stopped)
	for {
		s.mu.Lock()
		for s.next.empty() && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		w := s.next
		s.next = work{}
		s.started++
		round := s.started
		s.mu.Unlock()

		start := time.Now()
		err := s.sync(w)
		s.roundSeconds.Observe(time.Since(start).Seconds())
		if err != nil {
			s.logger.Error("embedded kafka: fsync failed; the answers waiting for it are not sent", "round", round, "err", err)
		}
		s.mu.Lock()
		s.done = round
		if err != nil {
			s.failedAt = round
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// close fsyncs every partition's active files and the logs once more (kfake closes its files
// unsynced), fails the answers still held, and closes the handles.
func (s *syncer) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.stopped
	if err := s.sync(work{all: true}); err != nil {
		s.logger.Error("embedded kafka: fsync at close", "err", err)
	}
	for _, f := range s.files {
		f.seg.Close()
		f.idx.Close()
	}
}

// sync fsyncs what w names, in parallel.
func (s *syncer) sync(w work) error {
	var paths []string // files to open and fsync by name: the logs, directories
	var files []*os.File
	var retired []*os.File // a rolled segment's handles: fsynced this round, then closed
	parts := w.parts
	if w.all {
		parts = s.allParts()
	}
	var errs []error
	for k := range parts {
		cur, old, more, err := s.active(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cur != nil {
			files = append(files, cur.seg, cur.idx)
		}
		if old != nil {
			retired = append(retired, old.seg, old.idx)
		}
		paths = append(paths, more...)
	}
	if w.logs || w.all {
		paths = append(paths, filepath.Join(s.root, "groups.log"), filepath.Join(s.root, "pids.log"), s.root)
	}
	errs = append(errs, s.fsyncAll(append(files, retired...), paths))
	for _, f := range retired {
		f.Close()
	}
	return errors.Join(errs...)
}

// fsyncAll fsyncs files and the files or directories at paths (a missing one is skipped: kfake
// has not written it yet) concurrently, since fsyncs of one file system share its journal
// commits, and records each one's size as synced.
func (s *syncer) fsyncAll(files []*os.File, paths []string) error {
	errs := make([]error, len(files)+len(paths))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = s.fsync(f) })
	}
	for i, p := range paths {
		wg.Go(func() {
			f, err := os.Open(p)
			if errors.Is(err, os.ErrNotExist) {
				return
			}
			if err != nil {
				errs[len(files)+i] = fmt.Errorf("open %s to fsync it: %w", p, err)
				return
			}
			defer f.Close()
			errs[len(files)+i] = s.fsync(f)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fsync fsyncs f and records the size it had before as synced.
func (s *syncer) fsync(f *os.File) error {
	fi, err := f.Stat()
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", f.Name(), err)
	}
	s.mu.Lock()
	s.synced[f.Name()] = fi.Size()
	s.mu.Unlock()
	return nil
}

// syncedSize is how much of the file at path the last fsync covered (-1: never fsynced).
func (s *syncer) syncedSize(path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.synced[path]; ok {
		return n
	}
	return -1
}

// partDir is where kfake keeps a partition's segments.
func (s *syncer) partDir(k partKey) string {
	return filepath.Join(s.root, "partitions", url.PathEscape(k.topic)+"-"+strconv.Itoa(int(k.part)))
}

// active returns the partition's active segment and index, opened to fsync them, once kfake
// has created both. When the segment is new to the syncer, old are the handles of the one
// before (written to before kfake rolled, unsynced), and more names what else needs an fsync:
// the directory, for its new entries, and the segments between the two; on a partition's first
// round, every segment and index it holds. A partition without files has none (cur nil).
func (s *syncer) active(k partKey) (cur, old *activeFiles, more []string, err error) {
	dir := s.partDir(k)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list %s: %w", dir, err)
	}
	bases := segmentBases(entries)
	prev := s.files[k]
	if len(bases) == 0 || (prev != nil && prev.base == bases[len(bases)-1]) {
		return prev, nil, nil, nil
	}
	base := bases[len(bases)-1]
	more = append(more, dir)
	for _, b := range bases[:len(bases)-1] {
		if prev == nil || b > prev.base {
			more = append(more, segmentPath(dir, b, ".dat"), segmentPath(dir, b, ".idx"))
		}
	}
	seg, err := os.Open(segmentPath(dir, base, ".dat"))
	if err != nil {
		return prev, nil, nil, fmt.Errorf("open the active segment of %s: %w", dir, err)
	}
	idx, err := os.Open(segmentPath(dir, base, ".idx"))
	if err != nil {
		seg.Close()
		return prev, nil, nil, fmt.Errorf("open the active index of %s: %w", dir, err)
	}
	cur = &activeFiles{base: base, seg: seg, idx: idx}
	s.files[k] = cur
	return cur, prev, more, nil
}

// segmentBases are the base offsets of the segments in a partition's directory whose segment
// (<base>.dat) and index (<base>.idx) both exist, ascending: kfake creates the segment first, so
// one without its index yet holds nothing acknowledged.
func segmentBases(entries []os.DirEntry) []int64 {
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	var bases []int64
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".dat")
		if !ok || !names[n+".idx"] {
			continue
		}
		if b, err := strconv.ParseInt(n, 10, 64); err == nil {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	return bases
}

func segmentPath(dir string, base int64, ext string) string {
	return filepath.Join(dir, strconv.FormatInt(base, 10)+ext)
}

// allParts are every partition kfake keeps a directory for.
func (s *syncer) allParts() map[partKey]struct{} {
	entries, err := os.ReadDir(filepath.Join(s.root, "partitions"))
	if err != nil {
		return nil
	}
	out := map[partKey]struct{}{}
	for _, e := range entries {
		i := strings.LastIndexByte(e.Name(), '-')
		if i < 0 {
			continue
		}
		topic, err := url.PathUnescape(e.Name()[:i])
		p, perr := strconv.ParseInt(e.Name()[i+1:], 10, 32)
		if err == nil && perr == nil {
			out[partKey{topic, int32(p)}] = struct{}{}
		}
	}
	return out
}

func newSyncConn(c net.Conn, s *syncer) *syncConn {
	sc := &syncConn{Conn: c, s: s, reqs: frames{headLen: 12}, answers: frames{headLen: 8}, held: map[int32]work{}}
	sc.onRequestHead, sc.onRequestWhole, sc.onAnswerHead = sc.requestHead, sc.requestWhole, sc.answerHead
	return sc
}

// syncConn learns from the requests a client sends (Read, on kfake's reading goroutine) what
// each one writes, and holds each answer (Write, on kfake's writing goroutine; kfake writes one
// answer per call) until the syncer has fsynced that. held is shared between the two under mu;
// reqs belongs to the reading side, answers to the writing side.
type syncConn struct {
	net.Conn
	s *syncer

	reqs    frames // 12-byte heads: size, API key, version, correlation id
	answers frames // 8-byte heads: size, correlation id
	// The frame callbacks, bound once: every request and answer passes through them.
	onRequestHead, onAnswerHead func(head []byte) (gather, more bool)
	onRequestWhole              func(frame []byte)
	answered                    work // what the answers of the Write being passed wrote

	mu   sync.Mutex
	held map[int32]work // correlation id of each request not yet answered: what it wrote
}

func (c *syncConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reqs.follow(p[:n], c.onRequestHead, c.onRequestWhole)
	}
	return n, err
}

// requestHead gathers a produce request whole, to learn its partitions, and learns what any
// other request writes from its API key.
func (c *syncConn) requestHead(head []byte) (gather, more bool) {
	if int16(binary.BigEndian.Uint16(head[4:])) == keyProduce {
		return true, true
	}
	c.requestWhole(head)
	return false, true
}

// requestWhole records what the request in frame writes (for any but a produce request, its
// head is enough).
func (c *syncConn) requestWhole(frame []byte) {
	req := frame[4:]
	w, ok := writes(int16(binary.BigEndian.Uint16(req)), req)
	if ok {
		c.mu.Lock()
		c.held[int32(binary.BigEndian.Uint32(req[4:]))] = w
		c.mu.Unlock()
	}
}

func (c *syncConn) Write(p []byte) (int, error) {
	c.answered = work{}
	c.answers.follow(p, c.onAnswerHead, nil)
	if w := c.answered; !w.empty() {
		c.s.answersHeld.Inc()
		if err := c.s.wait(w); err != nil {
			c.Conn.Close() // never acknowledged: the client sends it again, here or elsewhere
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// answerHead adds what the request an answer frame answers wrote to c.answered.
func (c *syncConn) answerHead(head []byte) (gather, more bool) {
	corr := int32(binary.BigEndian.Uint32(head[4:]))
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.held[corr]; ok {
		delete(c.held, corr)
		if c.answered.empty() {
			c.answered = h // kfake writes one answer per call: nothing to merge
		} else {
			c.answered.merge(h)
		}
	}
	return false, true
}

// keyProduce is the produce request's API key.
const keyProduce = 0

// syncOf is what kfake writes to disk for a request with the API key: nothing (false), the
// logs alone (offsets, group membership, producer ids, transactions' offsets: groups.log and
// pids.log), or, for the rest but produce requests (topics, configs, transaction markers, share
// groups), anything.
func syncOf(key int16) (w work, writes bool) {
	switch key {
	case 1, 2, 3, 9, 10, 12, 15, 16, 17, 18, 23, 29, 32, 35, 36, 46, 48, 50, 60, 61, 65, 66, 69,
		71, 74, 75, 77, 90:
		return work{}, false
	case 8, 11, 13, 14, 22, 24, 25, 28, 42, 47, 68:
		return work{logs: true}, true
	}
	return work{all: true}, true
}

// writes says what the request in req (from its API key on) makes kfake write, and false when
// it writes nothing or its answer never comes (a produce request with acks=0). A produce
// request that does not parse counts as writing everything.
func writes(key int16, req []byte) (work, bool) {
	if key != keyProduce {
		return syncOf(key)
	}
	pr, err := parseProduce(req)
	if err != nil {
		return work{all: true}, true
	}
	if pr.Acks == 0 {
		return work{}, false
	}
	w := work{parts: map[partKey]struct{}{}}
	for _, t := range pr.Topics {
		if t.Topic == "" { // named by topic id (version 13 on), which the embedded broker does not offer
			return work{all: true}, true
		}
		for _, p := range t.Partitions {
			w.parts[partKey{t.Topic, p.Partition}] = struct{}{}
		}
	}
	return w, true
}

// parseProduce reads a produce request from its API key on: the request header (version 1, or
// 2 with tagged fields in the flexible versions), then the body.
func parseProduce(b []byte) (*kmsg.ProduceRequest, error) {
	if len(b) < 10 {
		return nil, errors.New("short produce request")
	}
	pr := kmsg.NewPtrProduceRequest()
	pr.Version = int16(binary.BigEndian.Uint16(b[2:]))
	n := int(int16(binary.BigEndian.Uint16(b[8:]))) // client id, nullable
	b = b[10:]
	if n > 0 {
		if n > len(b) {
			return nil, errors.New("short produce request header")
		}
		b = b[n:]
	}
	if pr.IsFlexible() {
		var err error
		if b, err = skipTags(b); err != nil {
			return nil, err
		}
	}
	if err := pr.ReadFrom(b); err != nil {
		return nil, fmt.Errorf("parse produce request: %w", err)
	}
	return pr, nil
}

// skipTags skips a tagged-fields section: a count, then each tag's number, size and bytes.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, errors.New("bad tagged fields")
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, errors.New("bad tag size")
		}
		b = b[n+int(size):]
	}
	return b, nil
}
