package deploy

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/devstack/embedded"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestAlertsFireOnRealFaults makes three of the alerts' conditions happen to a real aggregator
// process on the real embedded stack, scrapes its /metrics before and after, and evaluates
// alerts.yml over what it scraped: the three alerts fire, the others stay quiet. The faults,
// made while the aggregator is down: the views log's retention passes one partition's
// checkpoint (TallyPartitionHalted), partition_claims is emptied while Redis keeps its guards
// (TallyEpochDisagreement), and records that do not decode reach the views and clicks topics
// (TallyDeadLetters). The other alerts' conditions are made for real by their packages' tests,
// which check the metric these rules read.
func TestAlertsFireOnRealFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStack(t)
	prod := s.producer(t)
	// The collector creates the event topics; this test runs none.
	var specs []kafka.TopicSpec
	for _, name := range []string{schemas.TopicViews, schemas.TopicLikes, schemas.TopicClicks, schemas.TopicFraudVerdicts} {
		specs = append(specs, kafka.TopicSpec{Name: name, Partitions: 4})
	}
	if err := kafka.CreateTopics(ctx, prod, kafka.Durability{ReplicationFactor: 1, MinInsyncReplicas: 1}, specs...); err != nil {
		t.Fatal(err)
	}
	produce := func(p int32, recs ...*kgo.Record) int64 {
		var last int64
		for _, r := range recs {
			r.Partition = p
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce to %s/%d: %v", r.Topic, p, err)
			}
			last = r.Offset
		}
		return last
	}
	views := func(item string, n int) []*kgo.Record {
		var out []*kgo.Record
		for i := range n {
			v := schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: fmt.Sprintf("v%d", i), TS: time.Now().UnixMilli()})
			out = append(out, &kgo.Record{Topic: schemas.TopicViews, Key: []byte(item), Value: v})
		}
		return out
	}

	agg := s.startAggregator(t)
	produce(0, views("alert-halt", 10)...)
	produce(1, views("alert-epoch", 10)...)
	s.waitCounted(t, ctx, 20)
	healthy := scrape(t, agg.metrics)
	agg.stop(t)

	last := produce(0, views("alert-halt", 5)...) // not counted: the aggregator is down
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: schemas.TopicViews, Partition: 0, At: last})
	if _, err := kadm.NewClient(prod).DeleteRecords(ctx, del); err != nil {
		t.Fatalf("delete records of views/0: %v", err)
	}
	if err := s.ch.Exec(ctx, "TRUNCATE TABLE partition_claims"); err != nil {
		t.Fatal(err)
	}
	produce(2, &kgo.Record{Topic: schemas.TopicViews, Key: []byte("junk"), Value: []byte("not a view")})
	produce(0, &kgo.Record{Topic: schemas.TopicClicks, Key: []byte("junk"), Value: []byte("{not a click")})

	agg = s.startAggregator(t)
	var faulty map[string]float64
	testinfra.WaitFor(t, time.Minute, "the faults seen by the aggregator", func() (bool, string) {
		faulty = scrape(t, agg.metrics)
		halted := faulty[`tally_aggregator_partitions_halted{partition="0",stream="views",topic="views"}`]
		epochs := faulty[`tally_views_epoch_disagreements_total`]
		views, clicks := faulty[`tally_dead_letters_total{source="views"}`], faulty[`tally_dead_letters_total{source="clicks"}`]
		return halted == 1 && epochs >= 1 && views == 1 && clicks == 1,
			fmt.Sprintf("halted %v, epoch disagreements %v, dead letters of views %v and clicks %v", halted, epochs, views, clicks)
	})

	firing := firingAlerts(t, loadedScrapes(t, healthy, faulty))
	want := "TallyDeadLetters,TallyEpochDisagreement,TallyPartitionHalted"
	if got := strings.Join(firing, ","); got != want {
		t.Errorf("got firing %s; want %s", got, want)
	}
}

// stack is a `pipeline infra` process (embedded Kafka, ClickHouse, Redis) and how to reach it.
type stack struct {
	dir, aggregatorBin string
	env                map[string]string
	ch                 clickhouse.Conn
}

func startStack(t *testing.T) *stack {
	t.Helper()
	// This module is outside the workspace; the commands are in it.
	work, err := filepath.Abs(filepath.Join("..", "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOWORK", work)
	bin := t.TempDir()
	pipeline, err := testinfra.Build(bin, "github.com/tallypipeline/tally/allinone/cmd/pipeline")
	if err != nil {
		t.Fatal(err)
	}
	aggregator, err := testinfra.Build(bin, "github.com/tallypipeline/tally/aggregator/cmd/aggregator")
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{dir: t.TempDir(), aggregatorBin: aggregator}
	_, redisPort, _ := strings.Cut(testinfra.MustFreeAddr(t), ":")
	startCommand(t, s.dir, "infra", pipeline, "infra", "--data_dir", s.dir, "--kafka.partitions", "4",
		"--embedded.kafka_addr", testinfra.MustFreeAddr(t), "--embedded.clickhouse_addr", testinfra.MustFreeAddr(t), "--embedded.redis_port", redisPort)
	testinfra.WaitFor(t, time.Minute, "the embedded stack writes "+embedded.EnvFile, func() (bool, string) {
		var err error
		s.env, err = embedded.ReadEnvFile(s.dir)
		return err == nil, fmt.Sprint(err)
	})
	s.ch, err = clickhouse.Open(&clickhouse.Options{Addr: []string{s.get("clickhouse.addr")}, Protocol: clickhouse.HTTP,
		Auth: clickhouse.Auth{Database: "tally", Username: s.get("clickhouse.username"), Password: s.get("clickhouse.password")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.ch.Close() })
	return s
}

func (s *stack) get(key string) string { return s.env[config.EnvName(key)] }

// producer is a Kafka client of the embedded broker, as its SASL user, that writes where each
// record says.
func (s *stack) producer(t *testing.T) *kgo.Client {
	t.Helper()
	sec := kafka.Security{SASLMechanism: s.get("kafka.sasl.mechanism"), Username: s.get("kafka.sasl.username"), Password: s.get("kafka.sasl.password")}
	dial, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append(kafka.ClientOptions([]string{s.get("kafka.brokers")}, "alerts-test", slogDiscard(), nil), dial...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitCounted waits until view_deltas holds n views.
func (s *stack) waitCounted(t *testing.T, ctx context.Context, n uint64) {
	t.Helper()
	testinfra.WaitFor(t, time.Minute, fmt.Sprintf("%d views counted", n), func() (bool, string) {
		var got uint64
		err := s.ch.QueryRow(ctx, "SELECT toUInt64(sum(views)) FROM view_deltas").Scan(&got)
		return err == nil && got == n, fmt.Sprintf("%d counted (%v)", got, err)
	})
}

// aggregatorProc is a running aggregator command.
type aggregatorProc struct {
	cmd     *exec.Cmd
	metrics string
}

func (s *stack) startAggregator(t *testing.T) *aggregatorProc {
	t.Helper()
	addr := testinfra.MustFreeAddr(t)
	cmd := startCommand(t, s.dir, "aggregator", s.aggregatorBin, "--data_dir", s.dir, "--aggregator.addr", addr,
		"--aggregator.flush_interval", "200ms", "--kafka.brokers", s.get("kafka.brokers"),
		"--kafka.sasl.mechanism", s.get("kafka.sasl.mechanism"), "--kafka.sasl.username", s.get("kafka.sasl.username"),
		"--kafka.sasl.password", s.get("kafka.sasl.password"), "--clickhouse.addr", s.get("clickhouse.addr"),
		"--clickhouse.password", s.get("clickhouse.password"), "--redis.addr", s.get("redis.addr"), "--redis.password", s.get("redis.password"))
	p := &aggregatorProc{cmd: cmd, metrics: "http://" + addr + "/metrics"}
	testinfra.WaitHTTP(t, time.Minute, "http://"+addr+"/healthz")
	return p
}

func (p *aggregatorProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("aggregator stop: %v", err)
	}
}

// startCommand starts bin with its output in dir/name.log, shown if the test fails, and stops it
// (SIGTERM, then SIGKILL) when the test ends.
func startCommand(t *testing.T, dir, name, bin string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("--- tail of %s log:\n%s", name, testinfra.LogTail(logPath, 4000))
		}
	})
	return cmd
}

// scrape reads the tally_* counters and gauges url exposes, by series in PromQL notation.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	out := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "tally_") {
			continue
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := name
			if len(labels) > 0 {
				sort.Strings(labels)
				series += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[series] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[series] = m.Gauge.GetValue()
			}
		}
	}
	return out
}

// loadedScrapes is promqltest's load notation for two scrapes taken a minute apart for 20
// minutes each way: before, then after. A series one scrape lacks is absent for that half, as
// it is to a Prometheus that scrapes a process whose metric does not exist yet.
func loadedScrapes(t *testing.T, before, after map[string]float64) string {
	t.Helper()
	half := func(m map[string]float64, s string) string {
		if v, ok := m[s]; ok {
			return fmt.Sprintf("%gx20", v)
		}
		return "_x20"
	}
	seen := map[string]bool{}
	var lines []string
	for _, m := range []map[string]float64{before, after} {
		for s := range m {
			if !seen[s] {
				seen[s] = true
				lines = append(lines, fmt.Sprintf("  %s %s %s", s, half(before, s), half(after, s)))
			}
		}
	}
	sort.Strings(lines)
	return "load 1m\n" + strings.Join(lines, "\n")
}

// firingAlerts evaluates every alert of alerts.yml over the series of load, at the time the
// faulty half has lasted 5 minutes plus the alert's `for`, and names those that hold.
func firingAlerts(t *testing.T, load string) []string {
	t.Helper()
	st := promqltest.LoadedStorage(t, load)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 1e6)
	var firing []string
	for name, r := range loadAlerts(t) {
		at := time.Unix(0, 0).Add(26*time.Minute + time.Duration(r.For))
		if alertHolds(t, engine, st, r.Expr, at) {
			firing = append(firing, name)
		}
	}
	sort.Strings(firing)
	return firing
}
