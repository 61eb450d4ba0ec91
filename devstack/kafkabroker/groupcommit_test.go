package kafkabroker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tallypipeline/tally/platform/kafka"
)

// TestSyncWritesAnswerAfterFsync produces one record at a time, over partitions whose segments
// roll every few batches, and commits offsets, with SyncWrites on: by the time each answer
// arrives, the syncer must have fsynced every byte kfake wrote for it, in the active segment and
// index, in the segments rolled away from, and in groups.log.
func TestSyncWritesAnswerAfterFsync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	k, err := Start(Options{Dir: dir, Addr: "127.0.0.1:0", SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	logger := slog.New(slog.DiscardHandler)
	cl, err := kgo.NewClient(append(kafka.ClientOptions(k.Addrs(), "test", logger, nil),
		append(kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100, DeliveryTimeout: 10 * time.Second}),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const topic = "views/raw" // escaped in kfake's directory name
	resp, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"segment.bytes": new("300")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		part := int32(i % 3)
		r := &kgo.Record{Topic: topic, Partition: part, Value: []byte(fmt.Sprintf("record %d with some bytes to fill the segment", i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		pdir := k.syncs.partDir(partKey{topic, part})
		entries, err := os.ReadDir(pdir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if filepath.Ext(e.Name()) != ".dat" && filepath.Ext(e.Name()) != ".idx" {
				continue
			}
			assertSynced(t, k.syncs, filepath.Join(pdir, e.Name()), fmt.Sprintf("after produce %d", i))
		}
	}
	if n := len(segmentBasesIn(t, k.syncs.partDir(partKey{topic, 0}))); n < 3 {
		t.Fatalf("partition 0 has %d segments; want the test to roll at least twice", n)
	}
	offs := kadm.Offsets{}
	offs.AddOffset(topic, 0, 5, -1)
	if _, err := adm.CommitOffsets(ctx, "g1", offs); err != nil {
		t.Fatal(err)
	}
	assertSynced(t, k.syncs, filepath.Join(dir, "groups.log"), "after an offset commit")
}

// TestSyncWritesFirstRoundCoversOlderSegments writes a partition's segments without SyncWrites,
// restarts the broker with it and produces once more: the partition's first round must fsync
// every segment kfake left unsynced, not only the active one.
func TestSyncWritesFirstRoundCoversOlderSegments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	produce := func(k *Broker, n int) {
		cl, err := kgo.NewClient(append(kafka.ClientOptions(k.Addrs(), "test", slog.New(slog.DiscardHandler), nil),
			kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100, DeliveryTimeout: 10 * time.Second})...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		_, err = kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"segment.bytes": new("300")}, "t")
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatal(err)
		}
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(fmt.Sprintf("record %d with some bytes to fill the segment", i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	k, err := Start(Options{Dir: dir, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	produce(k, 12)
	k.Close()
	k, err = Start(Options{Dir: dir, Addr: "127.0.0.1:0", SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	produce(k, 1)
	pdir := k.syncs.partDir(partKey{"t", 0})
	bases := segmentBasesIn(t, pdir)
	if len(bases) < 3 {
		t.Fatalf("got %d segments; want at least 3", len(bases))
	}
	for _, b := range bases {
		assertSynced(t, k.syncs, segmentPath(pdir, b, ".dat"), "after the first produce")
		assertSynced(t, k.syncs, segmentPath(pdir, b, ".idx"), "after the first produce")
	}
}

func assertSynced(t *testing.T, s *syncer, path, when string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.syncedSize(path); got < fi.Size() {
		t.Fatalf("%s: %s fsynced up to %d bytes; want its %d bytes", when, path, got, fi.Size())
	}
}

func segmentBasesIn(t *testing.T, dir string) []int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return segmentBases(entries)
}

// TestSyncOf checks which requests hold their answer for an fsync, and what a produce request
// names.
func TestSyncOf(t *testing.T) {
	produce := func(acks int16, clientID string, version int16) []byte {
		pr := kmsg.NewPtrProduceRequest()
		pr.Version, pr.Acks = version, acks
		pr.Topics = []kmsg.ProduceRequestTopic{{Topic: "views", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 4}, {Partition: 7}}}}
		b := binary.BigEndian.AppendUint16(nil, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 99)
		b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
		b = append(b, clientID...)
		if pr.IsFlexible() {
			b = append(b, 0)
		}
		return pr.AppendTo(b)
	}
	header := func(key int16) []byte { return binary.BigEndian.AppendUint16(make([]byte, 0, 8), uint16(key)) }
	cases := []struct {
		name   string
		key    int16
		req    []byte
		writes bool
		want   work
	}{
		{"fetch", 1, header(1), false, work{}},
		{"metadata", 3, header(3), false, work{}},
		{"offset commit", 8, header(8), true, work{logs: true}},
		{"join group", 11, header(11), true, work{logs: true}},
		{"create topics", 19, header(19), true, work{all: true}},
		{"end txn", 26, header(26), true, work{all: true}},
		{"unknown key", 999, header(999), true, work{all: true}},
		{"produce v7", 0, produce(-1, "tally", 7), true, work{parts: map[partKey]struct{}{{"views", 4}: {}, {"views", 7}: {}}}},
		{"produce v11 flexible", 0, produce(-1, "tally-collector", 11), true, work{parts: map[partKey]struct{}{{"views", 4}: {}, {"views", 7}: {}}}},
		{"produce acks=0", 0, produce(0, "", 9), false, work{}},
		{"produce cut short", 0, produce(-1, "x", 9)[:20], true, work{all: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, writes := writes(c.key, c.req)
			if writes != c.writes || fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v, %v; want %v, %v", got, writes, c.want, c.writes)
			}
		})
	}
}

// FuzzSyncConnFrames feeds arbitrary bytes, in arbitrary pieces, to a connection's request and
// answer parsers: whatever a client sends, they must not panic.
func FuzzSyncConnFrames(f *testing.F) {
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0, 1}, uint8(3))
	f.Add([]byte{0, 0, 0, 20, 0, 0, 0, 11, 0, 0, 0, 1, 0, 1, 'x', 0, 1, 2, 3, 4, 5, 6}, uint8(5))
	f.Fuzz(func(t *testing.T, b []byte, piece uint8) {
		c := newSyncConn(nil, nil)
		step := int(piece%16) + 1
		for i := 0; i < len(b); i += step {
			c.reqs.follow(b[i:min(i+step, len(b))], c.onRequestHead, c.onRequestWhole)
		}
		onHead := func(head []byte) (gather, more bool) { return head[0] == 0, true }
		for i := 0; i < len(b); i += step {
			c.answers.follow(b[i:min(i+step, len(b))], onHead, func([]byte) {})
		}
	})
}
