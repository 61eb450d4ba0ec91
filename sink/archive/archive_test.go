package archive_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/archive"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const partitions = 4

func startKafka(t *testing.T) (string, *kgo.Client) {
	t.Helper()
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.DefaultProduceTopic(schemas.TopicViews), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := kafka.EnsureTopics(context.Background(), cl, partitions, schemas.TopicViews, schemas.TopicLikes); err != nil {
		t.Fatal(err)
	}
	return k.Addr(), cl
}

// produceViews writes n views spread over partitions, their times over three hours with some
// an hour late, and a few undecodable records; it returns the end offset of each partition.
func produceViews(t *testing.T, cl *kgo.Client, n int, base time.Time) map[int32]int64 {
	t.Helper()
	var recs []*kgo.Record
	ends := map[int32]int64{}
	for i := range n {
		ts := base.Add(time.Duration(i) * 3 * time.Hour / time.Duration(n))
		if i%97 == 0 {
			ts = ts.Add(-time.Hour)
		}
		v := schemas.AppendView(nil, schemas.View{ItemID: fmt.Sprintf("item-%d", i%31), ViewerID: fmt.Sprintf("u%d", i), EventID: fmt.Sprintf("e%d", i), TS: ts.UnixMilli()})
		if i%1000 == 999 {
			v = []byte("not a view")
		}
		p := int32(i % partitions)
		recs = append(recs, &kgo.Record{Topic: schemas.TopicViews, Partition: p, Value: v})
		ends[p]++
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return ends
}

func newArchive(t *testing.T, brokers string, st store.Store, rotation time.Duration, maxBytes int64) *archive.Archive {
	t.Helper()
	return newMember(t, brokers, st, rotation, maxBytes, "")
}

// newMember is an archive of the test's group as the static member instanceID ("" dynamic).
func newMember(t *testing.T, brokers string, st store.Store, rotation time.Duration, maxBytes int64, instanceID string) *archive.Archive {
	t.Helper()
	views, _ := rawlog.TopicByName(schemas.TopicViews)
	likes, _ := rawlog.TopicByName(schemas.TopicLikes)
	a, err := archive.New(archive.Config{
		Brokers: []string{brokers}, Group: "sink-test", InstanceID: instanceID, SessionTimeout: 6 * time.Second,
		Topics: []rawlog.Topic{views, likes}, Rotation: rotation, MaxBatchBytes: maxBytes,
		Retention: map[string]time.Duration{}, RetentionEvery: time.Hour,
	}, st, time.Now, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitCommitted waits until the group has committed every partition's end offset.
func waitCommitted(t *testing.T, cl *kgo.Client, ends map[int32]int64) {
	t.Helper()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs, err := adm.FetchOffsets(context.Background(), "sink-test")
		done := err == nil
		for p, end := range ends {
			if o, ok := offs.Lookup(schemas.TopicViews, p); !ok || o.At < end {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group did not commit %v within 30s (last fetch %v, err %v)", ends, offs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkExactlyOnce audits the files: every offset of every partition below its end is covered
// by one flush, and every decodable record is one row.
func checkExactlyOnce(t *testing.T, st store.Store, ends map[int32]int64, base time.Time) map[int32]*rawlog.Coverage {
	t.Helper()
	cov, err := rawlog.Audit(context.Background(), st, schemas.TopicViews, base.Add(-2*time.Hour), base.Add(4*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range ends {
		c := cov[p]
		if c == nil || len(c.Ranges) != 1 || c.Ranges[0] != [2]int64{0, end - 1} {
			t.Fatalf("partition %d: got flush ranges %v; want one range 0-%d", p, c, end-1)
		}
		for off := range end {
			_, has := c.Rows[off]
			undecodable := (off*partitions+int64(p))%1000 == 999
			if has == undecodable {
				t.Fatalf("partition %d offset %d: in a file %v; want %v", p, off, has, !undecodable)
			}
		}
	}
	return cov
}

func TestArchiveWritesEveryRecordOnceAndReplaysIntoTheSameFiles(t *testing.T) {
	brokers, cl := startKafka(t)
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	st, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	ends := produceViews(t, cl, 20000, base)

	// A small size bound cuts flushes by size as well as by the rotation interval.
	a := newArchive(t, brokers, st, 300*time.Millisecond, 64<<10)
	a.Start()
	go func() { <-a.Done(); t.Logf("loop ended: %v", a.Err()) }()
	waitCommitted(t, cl, ends)
	more := produceViews(t, cl, 4000, base) // a second round: rotation cuts it
	for p := range ends {
		ends[p] += more[p]
	}
	waitCommitted(t, cl, ends)
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, st, ends, base)
	before := snapshot(t, dir)
	if len(before) < 4*partitions {
		t.Fatalf("files: got %d; want several per partition (size and time cuts, several hours)", len(before))
	}

	// A crash after the last flush of partition 1 was written but before its commit: the group
	// resumes at that flush's first offset, and the marker sends the replay into the same files.
	var m struct{ First, Last int64 }
	b, err := st.ReadAll(context.Background(), rawlog.MarkerName(schemas.TopicViews, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(string(b), `{"first":%d,"last":%d}`, &m.First, &m.Last); err != nil || m.Last != ends[1]-1 {
		t.Fatalf("marker of partition 1: got %s; want its last flush, ending at %d", b, ends[1]-1)
	}
	adm := kadm.NewClient(cl)
	rewind := kadm.Offsets{}
	rewind.Add(kadm.Offset{Topic: schemas.TopicViews, Partition: 1, At: m.First, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(context.Background(), "sink-test", rewind); err != nil {
		t.Fatal(err)
	}
	// The crash came after the first of its renames: the replay must write the other files
	// and may not put a record of the kept one in a second file.
	var flushFiles []string
	for name := range before {
		if ref, err := rawlog.ParseFileName(name); err == nil && ref.Partition == 1 && ref.First == m.First {
			flushFiles = append(flushFiles, name)
		}
	}
	slices.Sort(flushFiles)
	if len(flushFiles) < 2 {
		t.Fatalf("files of the last flush of partition 1: got %v; want at least two hours", flushFiles)
	}
	for _, name := range flushFiles[1:] {
		os.Remove(filepath.Join(dir, name))
	}
	// A smaller size bound and a shorter rotation would cut the replayed records elsewhere: the
	// marker must win.
	a = newArchive(t, brokers, st, 50*time.Millisecond, 2<<10)
	a.Start()
	waitCommitted(t, cl, ends)
	time.Sleep(300 * time.Millisecond) // several rotation intervals: the replay must not cut early
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, st, ends, base)
	after := snapshot(t, dir)
	if len(after) != len(before) {
		t.Fatalf("files after the replay: got %d; want the same %d", len(after), len(before))
	}
	for name, body := range before {
		if !bytes.Equal(after[name], body) {
			t.Fatalf("file %s changed in the replay", name)
		}
	}
}

// Two copies of the sink share the partitions as one group, and one stopping (a scale-down, a
// rollout) hands its partitions to the other in the middle of a round of views: every record
// is still in exactly one flush, one row each.
func TestTwoCopiesShareTheLogAndHandOver(t *testing.T) {
	brokers, cl := startKafka(t)
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := newMember(t, brokers, st, 100*time.Millisecond, 64<<10, "sink-a")
	b := newMember(t, brokers, st, 100*time.Millisecond, 64<<10, "sink-b")
	a.Start()
	b.Start()
	ends := produceViews(t, cl, 8000, base)
	waitCommitted(t, cl, ends)
	// The first copy stops while both are still reading a second round.
	for p, n := range produceViews(t, cl, 8000, base.Add(time.Hour)) {
		ends[p] += n
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatalf("stop the first copy: %v", err)
	}
	waitCommitted(t, cl, ends)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("stop the second copy: %v", err)
	}
	checkExactlyOnce(t, st, ends, base)
}

// snapshot returns every data file's contents by name.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	st, _ := store.NewLocal(dir)
	names, err := st.List(context.Background(), schemas.TopicViews+"/")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

func testLogger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("TALLY_TEST_LOG") == "1" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
