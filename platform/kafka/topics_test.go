package kafka

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDurabilityResolve(t *testing.T) {
	tests := []struct {
		name             string
		d                Durability
		brokers          int
		wantRF, wantISR  int
		wantErrSubstring string
	}{
		{"auto, one embedded broker", Durability{}, 1, 1, 1, ""},
		{"auto, three brokers", Durability{}, 3, 3, 2, ""},
		{"auto, five brokers stays at 3", Durability{}, 5, 3, 2, ""},
		{"auto, two brokers", Durability{}, 2, 2, 1, ""},
		{"explicit", Durability{ReplicationFactor: 5, MinInsyncReplicas: 3}, 6, 5, 3, ""},
		{"explicit factor, auto isr", Durability{ReplicationFactor: 4}, 4, 4, 3, ""},
		{"factor above brokers", Durability{ReplicationFactor: 3}, 1, 0, 0, "above the 1 brokers"},
		{"isr above factor", Durability{ReplicationFactor: 2, MinInsyncReplicas: 3}, 3, 0, 0, "min.insync.replicas 3 is above"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rf, isr, err := tt.d.resolve(tt.brokers)
			if tt.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstring) {
					t.Fatalf("got %v; want an error containing %q", err, tt.wantErrSubstring)
				}
				return
			}
			if err != nil || rf != tt.wantRF || isr != tt.wantISR {
				t.Fatalf("got rf %d isr %d err %v; want rf %d isr %d", rf, isr, err, tt.wantRF, tt.wantISR)
			}
		})
	}
}

// TestCreateTopicsOnACluster creates tally's topics on a three-broker cluster speaking the
// real protocol and reads back what the brokers hold: replication 3, min.insync.replicas 2,
// the likes topic kept forever and never compacted, even when it existed with a short
// retention before, and the topk topic compacted.
func TestCreateTopicsOnACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := clusterClient(t, 3)
	adm := kadm.NewClient(cl)
	// An old likes topic made with the broker's default retention and compaction.
	if _, err := adm.CreateTopic(ctx, 4, 3, map[string]*string{"retention.ms": kadm.StringPtr("60000"), "cleanup.policy": kadm.StringPtr("compact")}, "likes"); err != nil {
		t.Fatal(err)
	}
	specs := []TopicSpec{{Name: "views", Partitions: 6, Retention: 7 * 24 * time.Hour}, {Name: "likes", Partitions: 6, Retention: Forever},
		{Name: "topk", Partitions: 1, Compact: true}}
	if err := CreateTopics(ctx, cl, Durability{}, specs...); err != nil {
		t.Fatal(err)
	}
	details, err := adm.ListTopics(ctx, "views", "likes", "topk")
	if err != nil {
		t.Fatal(err)
	}
	for topic, wantParts := range map[string]int{"views": 6, "likes": 4, "topk": 1} {
		d := details[topic]
		if len(d.Partitions) != wantParts {
			t.Errorf("%s: got %d partitions; want %d (an existing topic keeps its count)", topic, len(d.Partitions), wantParts)
		}
		for _, p := range d.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("%s/%d: got %d replicas; want 3", topic, p.Partition, len(p.Replicas))
			}
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "views", "likes", "topk")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"views": {"retention.ms": "604800000", "min.insync.replicas": "2"},
		"likes": {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"},
		"topk":  {"cleanup.policy": "compact", "min.insync.replicas": "2"},
	}
	for _, rc := range rcs {
		got := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[c.Key] = *c.Value
			}
		}
		for k, v := range want[rc.Name] {
			if got[k] != v {
				t.Errorf("%s %s: got %q; want %q", rc.Name, k, got[k], v)
			}
		}
	}
}

// TestCreateTopicsRefusesAFactorAboveTheCluster: a replication factor of 3 on one embedded
// broker is a configuration error, reported as such rather than creating a weaker topic.
func TestCreateTopicsRefusesAFactorAboveTheCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cl := clusterClient(t, 1)
	err := CreateTopics(ctx, cl, Durability{ReplicationFactor: 3}, TopicSpec{Name: "views", Partitions: 1})
	if err == nil || !strings.Contains(err.Error(), "replication factor 3 is above the 1 brokers") {
		t.Fatalf("got %v; want the replication factor named", err)
	}
}

func TestPartitionOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := clusterClient(t, 1, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	// Partition 1 gets two records, partition 2 one, partition 0 none.
	for _, p := range []int32{1, 1, 2} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		topic   string
		list    func(context.Context, ...string) (kadm.ListedOffsets, error)
		want    map[int32]int64
		wantErr string
	}{
		{"end offsets of every partition", "t", adm.ListEndOffsets, map[int32]int64{0: 0, 1: 2, 2: 1}, ""},
		{"start offsets", "t", adm.ListStartOffsets, map[int32]int64{0: 0, 1: 0, 2: 0}, ""},
		{"a topic not created yet is an empty log", "missing", adm.ListEndOffsets, map[int32]int64{}, ""},
		{"a failed listing names what and the topic", "t", func(context.Context, ...string) (kadm.ListedOffsets, error) {
			return nil, errors.New("broker gone")
		}, nil, "list end offsets of t: broker gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PartitionOffsets(tt.topic, "end", func() (kadm.ListedOffsets, error) { return tt.list(ctx, tt.topic) })
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got error %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

// clusterClient starts a kfake cluster of n brokers for one test and returns a client of it
// (ClientOptions and opts); both end with the test.
func clusterClient(t *testing.T, n int, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(append(ClientOptions(c.ListenAddrs(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
