// Package schemas holds what every tally component must agree on: the event types and their
// validation, their wire encoding in Kafka, the topic names, and in subpackages the ClickHouse
// DDL as versioned migrations and the dedupe rule the streaming path and the nightly recount
// must both apply (dedupe). It is pure data and functions: no I/O, no state.
package schemas

// Topic names. Records are keyed by item_id, so every event of one item lands in one partition
// and per-item work (dedupe, totals, like state) is partition-local.
const (
	TopicViews = "views"
	TopicLikes = "likes"
	// TopicCounted carries the aggregators' deduplicated counts, one record per batch chunk,
	// in the partition of the batch's source partition (counted.go); topk reads it.
	TopicCounted = "counted"
	// TopicTopK is compacted: one record per kind and window, the latest list (topk.go).
	TopicTopK = "topk"
)

// Click topics. Clicks are keyed by ad_id; fraud verdicts are keyed by the ad_id of their
// click. The two topics must have the same number of partitions (both are created with
// kafka.partitions), so a verdict lands in the partition number of its click and the aggregator
// that owns a clicks partition owns the same verdicts partition.
const (
	TopicClicks        = "clicks"
	TopicFraudVerdicts = "fraud_verdicts"
)

// TopicCounterEvents carries the adds to generic counters of namespaces in mode eventual
// (counter_event.go), keyed by namespace and counter, so one counter's adds are in one
// partition, in order.
const TopicCounterEvents = "counter_events"
