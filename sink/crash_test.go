package sink_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// sinkProc is the sink binary running as a child process, killed and restarted by the test.
type sinkProc struct {
	bin, log string
	args     []string
	cmd      *exec.Cmd
	done     chan struct{}
}

func (p *sinkProc) start(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== start at %s\n", time.Now().Format(time.RFC3339Nano))
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
}

func (p *sinkProc) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// TestSinkExactlyOnceThroughKills produces views (some an hour or two late) while the sink
// process is SIGKILLed at random moments and restarted, then checks that the files hold every
// acknowledged view exactly once, and that each partition's flushes cover its whole log without
// gap or overlap.
func TestSinkExactlyOnceThroughKills(t *testing.T) {
	const parts = 4
	ctx := context.Background()
	k := startKafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.DefaultProduceTopic(schemas.TopicViews))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.EnsureTopics(ctx, cl, parts, schemas.TopicViews, schemas.TopicLikes); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	admin, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := &sinkProc{bin: sinkBin, log: filepath.Join(dir, "sink.log"), args: []string{
		"--kafka.brokers", k.Addr(), "--clickhouse.addr", "127.0.0.1:1", "--redis.addr", "127.0.0.1:1",
		"--data_dir", filepath.Join(dir, "data"), "--sink.dir", filepath.Join(dir, "files"), "--sink.addr", admin,
		"--sink.instance_id", "sink-under-test", "--sink.rotation", "1s", "--sink.max_batch_bytes", "1048576",
	}}
	p.start(t)
	defer func() {
		if t.Failed() {
			t.Logf("--- sink log:\n%s", testinfra.LogTail(p.log, 6000))
		}
	}()

	// Chaos: SIGKILL every 0.3-1.5 s, restart after up to 300 ms.
	stopChaos, chaosDone := make(chan struct{}), make(chan int)
	go func() {
		rng := rand.New(rand.NewPCG(7, 1))
		kills := 0
		defer func() { chaosDone <- kills }()
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(300+rng.IntN(1200)) * time.Millisecond):
			}
			p.stop(syscall.SIGKILL)
			kills++
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			p.start(t)
		}
	}()

	acked := map[string]bool{}
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(12 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		var recs []*kgo.Record
		var ids []string
		for range 500 {
			id := fmt.Sprintf("e%d", n)
			ts := now.Add(-time.Duration(rng.IntN(3)) * time.Hour).Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			v := schemas.View{ItemID: fmt.Sprintf("item-%d", rng.IntN(50)), ViewerID: fmt.Sprintf("u%d", rng.IntN(1000)), EventID: id, TS: ts.UnixMilli()}
			recs = append(recs, &kgo.Record{Key: []byte(v.ItemID), Value: schemas.AppendView(nil, v)})
			ids = append(ids, id)
			n++
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			acked[id] = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stopChaos)
	kills := <-chaosDone
	if kills < 5 {
		t.Fatalf("got %d kills; want at least 5", kills)
	}
	t.Logf("%d views acknowledged; sink killed %d times", len(acked), kills)

	// Let the last incarnation catch up, then stop it cleanly.
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, schemas.TopicViews)
	if err != nil {
		t.Fatal(err)
	}
	testinfra.WaitFor(t, time.Minute, "the sink commits every partition's end", func() (bool, string) {
		offs, err := adm.FetchOffsets(ctx, "tally-sink")
		if err != nil {
			return false, err.Error()
		}
		var behind []string
		ends.Each(func(e kadm.ListedOffset) {
			if o, ok := offs.Lookup(e.Topic, e.Partition); !ok || o.At < e.Offset {
				behind = append(behind, fmt.Sprintf("p%d %d/%d", e.Partition, o.At, e.Offset))
			}
		})
		return len(behind) == 0, strings.Join(behind, ", ")
	})
	p.stop(syscall.SIGTERM)

	st, err := store.NewLocal(filepath.Join(dir, "files"))
	if err != nil {
		t.Fatal(err)
	}
	from, to := now.Add(-4*time.Hour), now.Add(time.Hour)
	cov, err := rawlog.Audit(ctx, st, schemas.TopicViews, from, to)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		c := cov[e.Partition]
		if e.Offset > 0 && (c == nil || len(c.Ranges) != 1 || c.Ranges[0] != [2]int64{0, e.Offset - 1}) {
			t.Errorf("partition %d: got flushes covering %v; want one range 0-%d", e.Partition, c, e.Offset-1)
		}
	})
	seen := map[string]int{}
	err = rawlog.Files[rawlog.ViewRow]{Store: st, Topic: schemas.TopicViews}.Read(ctx, from, to, func(_ int32, rows []rawlog.ViewRow) error {
		for _, r := range rows {
			seen[r.EventID]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	missing, twice := 0, 0
	for id := range acked {
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			twice++
		}
	}
	if missing > 0 || twice > 0 || len(seen) != len(acked) {
		t.Fatalf("got %d acknowledged views missing, %d in more than one row, %d distinct in files; want 0, 0, %d", missing, twice, len(seen), len(acked))
	}
}
