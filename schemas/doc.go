// Package schemas holds what every tally component must agree on: the event types and their
// validation, their wire encoding in Kafka, the topic names, and (in subpackages) the ClickHouse
// DDL as versioned migrations. It is pure data and functions: no I/O, no state.
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
