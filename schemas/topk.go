package schemas

import (
	"fmt"
	"time"
)

// The top-K lists topk publishes (to the compacted topk topic, to Redis for the API, and to
// ClickHouse topk_snapshots): one list per kind and window, as JSON.

// TopWindows are the windows topk ranks over, in a fixed order.
var TopWindows = [...]string{"1m", "1h", "24h"}

// MaxTopK is the longest list topk publishes and the API serves.
const MaxTopK = 1000

// TopList is one published list.
type TopList struct {
	Kind       string    `json:"kind"`   // items or ads
	Window     string    `json:"window"` // 1m, 1h or 24h
	ComputedAt time.Time `json:"computed_at"`
	// From and To bound the event time the list counts: [From, To).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Exact is true for 1m and 1h. For 24h, ErrorBound bounds how far every count is from the
	// true count, either way, and a key missing from the list has a true count of at most the
	// last entry's count plus the bound (docs/ARCHITECTURE.md, "top-K").
	Exact      bool       `json:"exact"`
	ErrorBound *uint64    `json:"error_bound,omitempty"`
	Entries    []TopEntry `json:"entries"`
}

// TopEntry is one ranked key: rank 1 is the largest count; equal counts rank by key, ascending.
type TopEntry struct {
	Rank  int    `json:"rank"`
	Key   string `json:"key"`
	Count uint64 `json:"count"`
}

// TopRedisKey is the Redis key holding the latest list of kind and window (the "1" is the
// layout's version). A hash tag keeps the lists on one Redis Cluster node.
func TopRedisKey(kind CountKind, window string) string {
	return fmt.Sprintf("topk1:{topk}:%s:%s", kind, window)
}

// TopKafkaKey is the key of kind and window's records in the compacted topk topic.
func TopKafkaKey(kind CountKind, window string) string { return kind.String() + "/" + window }
