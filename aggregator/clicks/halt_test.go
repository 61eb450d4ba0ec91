package clicks

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The clicks stream halts a partition whose checkpoint retention passed, like the views one:
// the deleted clicks are not billed silently as if they never were; once decided, the clicks
// left count.
func TestClicksCheckpointBeforeTheLogHalts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "clicks_halt_test")
	prod := infra.Producer(t, schemas.TopicClicks, 2)
	infra.Producer(t, schemas.TopicFraudVerdicts, 2)
	const ad = "halt-ad"
	n, partition, last := 0, int32(0), int64(0)
	produce := func(k int) {
		for range k {
			n++
			c := schemas.Click{ClickID: fmt.Sprintf("halt-%d", n), AdID: ad, CampaignID: "c", UserHash: "u", IPHash: "i", Device: "web", TS: time.Now().UnixMilli()}
			r := &kgo.Record{Topic: schemas.TopicClicks, Key: []byte(ad), Value: schemas.AppendClick(nil, c)}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			partition, last = r.Partition, r.Offset
		}
	}
	clicks := func() int64 {
		var got int64
		if err := conn.QueryRow(ctx, "SELECT toInt64(sum(clicks)) FROM click_deltas WHERE ad_id = ?", ad).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	waitClicks := func(want int64) {
		testinfra.WaitFor(t, 30*time.Second, fmt.Sprintf("%d clicks counted", want), func() (bool, string) {
			got := clicks()
			return got == want, fmt.Sprintf("%d counted", got)
		})
	}
	start := func() *member.Source {
		src, err := NewSource(member.Config{Group: member.Group{Brokers: []string{infra.Kafka.Addr()}, Name: "clicks-halt-test", SessionTimeout: 6 * time.Second},
			Poll: 200 * time.Millisecond, Halts: halt.Store{Conn: conn}, Owner: "test", Now: time.Now, Logger: infra.Logger, Registry: prometheus.NewRegistry()},
			New(testCfg, conn, time.Now, infra.Logger, prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		src.Start()
		return src
	}
	stop := func(src *member.Source) {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		if err := src.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}

	first := start()
	produce(4)
	waitClicks(4)
	stop(first)
	produce(5) // uncounted: the aggregator is down; retention deletes all but the last two
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: schemas.TopicClicks, Partition: partition, At: last - 1})
	if _, err := kadm.NewClient(prod).DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}

	second := start()
	defer stop(second)
	mine := fmt.Sprintf("partition %s/%d halted: ", schemas.TopicClicks, partition)
	testinfra.WaitFor(t, 30*time.Second, "the partition halted", func() (bool, string) {
		err := second.Check(ctx)
		return err != nil && strings.Contains(err.Error(), mine) && strings.Contains(err.Error(), "before the log's start"), fmt.Sprint(err)
	})
	time.Sleep(time.Second)
	if got := clicks(); got != 4 {
		t.Errorf("got %d clicks counted while halted; want 4", got)
	}
	store := halt.Store{Conn: conn}
	open, err := store.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range open {
		if err := halt.Run(ctx, store, halt.Args{Topic: o.Topic, Partition: o.Partition, Decide: true, From: halt.FromStart, By: "test"}, time.Now(), io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	waitClicks(6)
	if err := second.Check(ctx); err != nil {
		t.Errorf("got %v after the decisions; want ready", err)
	}
}
