package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/retry"
)

// Durability is how many brokers hold each record of tally's topics. With acks=all (every
// producer here), a write is acknowledged once MinInsyncReplicas replicas have it, so a
// cluster of 3 replicas and 2 in sync keeps every acknowledged record through the loss of one
// broker and keeps taking writes while one is down.
//
// Zero means automatic: ReplicationFactor min(3, brokers in the cluster), so one embedded
// broker gets 1 and a real cluster 3; MinInsyncReplicas one less than the replication factor,
// at least 1.
type Durability struct {
	ReplicationFactor int
	MinInsyncReplicas int
}

// Forever is a TopicSpec.Retention that keeps every record (retention.ms = -1).
const Forever time.Duration = -1

// TopicSpec is one topic as tally creates it.
type TopicSpec struct {
	Name       string
	Partitions int32
	// Retention: Forever, a positive duration, or 0 for the broker's default. A topic kept
	// Forever is also never compacted, and an existing one is set so on every start: it is a
	// source of truth (likes), and its key (item_id) is not the identity of a record, so
	// compaction would delete real changes.
	Retention time.Duration
	// Compact makes a new topic compacted (cleanup.policy=compact): a reader from the start
	// ends with the latest record of each key. Not with Retention Forever.
	Compact bool
}

// resolve returns the replication factor and min.insync.replicas for a cluster of n brokers.
func (d Durability) resolve(brokers int) (rf, isr int, err error) {
	rf = d.ReplicationFactor
	if rf == 0 {
		rf = min(3, brokers)
	}
	if rf > brokers {
		return 0, 0, fmt.Errorf("replication factor %d is above the %d brokers of the cluster", rf, brokers)
	}
	isr = d.MinInsyncReplicas
	if isr == 0 {
		isr = max(1, rf-1)
	}
	if isr > rf {
		return 0, 0, fmt.Errorf("min.insync.replicas %d is above the replication factor %d", isr, rf)
	}
	return rf, isr, nil
}

// topicConfigs are the settings a new topic is created with.
func (s TopicSpec) topicConfigs(isr int) map[string]*string {
	cfg := map[string]*string{"min.insync.replicas": kadm.StringPtr(strconv.Itoa(isr))}
	switch {
	case s.Retention == Forever:
		cfg["retention.ms"] = kadm.StringPtr("-1")
		cfg["retention.bytes"] = kadm.StringPtr("-1")
		cfg["cleanup.policy"] = kadm.StringPtr("delete")
	case s.Retention > 0:
		cfg["retention.ms"] = kadm.StringPtr(strconv.FormatInt(s.Retention.Milliseconds(), 10))
	}
	if s.Compact {
		cfg["cleanup.policy"] = kadm.StringPtr("compact")
	}
	return cfg
}

// CreateTopics creates each missing topic with its partitions, d's replication and
// min.insync.replicas, and its retention. An existing topic keeps its partitions and
// replication (both can only be changed by an operator: see deploy/README.md), but a topic
// kept Forever has its retention set again, so that a broker default cannot expire the source
// of truth. It retries until ctx ends so a component can start before its brokers.
func CreateTopics(ctx context.Context, cl *kgo.Client, d Durability, specs ...TopicSpec) error {
	adm := kadm.NewClient(cl)
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	err := retry.Do(ctx, time.Second, func() error {
		brokers, err := adm.ListBrokers(ctx)
		if err != nil {
			return fmt.Errorf("list brokers: %w", err)
		}
		rf, isr, err := d.resolve(len(brokers))
		if err != nil {
			return err
		}
		for _, s := range specs {
			_, err := adm.CreateTopic(ctx, s.Partitions, int16(rf), s.topicConfigs(isr), s.Name)
			exists := errors.Is(err, kerr.TopicAlreadyExists)
			if err != nil && !exists {
				return fmt.Errorf("create topic %s (%d partitions, replication %d): %w", s.Name, s.Partitions, rf, err)
			}
			if exists && s.Retention == Forever {
				if err := keepForever(ctx, adm, s.Name); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil)
	if err != nil {
		return fmt.Errorf("ensure topics %v: %w", names, err)
	}
	return nil
}

// keepForever sets an existing topic's retention to unlimited and its cleanup to delete.
func keepForever(ctx context.Context, adm *kadm.Client, topic string) error {
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("-1")},
		{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("-1")},
		{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")},
	}, topic)
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		return fmt.Errorf("keep topic %s forever (retention.ms=-1): %w", topic, err)
	}
	return nil
}

// PartitionOffsets runs list, one kadm listing of topic's partitions (end, start, or by time),
// and returns its offsets by partition. A topic that does not exist yet is an empty log: no
// offsets and no error. what names the listing in errors ("end", "start").
func PartitionOffsets(topic, what string, list func() (kadm.ListedOffsets, error)) (map[int32]int64, error) {
	listed, err := list()
	if err != nil {
		return nil, fmt.Errorf("list %s offsets of %s: %w", what, topic, err)
	}
	out := map[int32]int64{}
	var lerr error
	listed.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition) && o.Partition < 0:
		case o.Err != nil:
			lerr = errors.Join(lerr, fmt.Errorf("list %s offset of %s/%d: %w", what, topic, o.Partition, o.Err))
		default:
			out[o.Partition] = o.Offset
		}
	})
	return out, lerr
}
