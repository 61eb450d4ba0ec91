-- top-K history: every list topk publishes (every topk.publish_interval), its first
-- topk.history_k entries, for dashboards and history. The API reads the latest list from Redis,
-- not from here. A list is (kind, window, computed_at); publishing it again after a crash writes
-- the same rows, which ReplacingMergeTree keeps once per key: read with FINAL, or group by
-- computed_at.
CREATE TABLE IF NOT EXISTS topk_snapshots
(
    kind        LowCardinality(String),
    window      LowCardinality(String),
    computed_at DateTime64(3, 'UTC'),
    rank        UInt16,
    key         String,
    count       UInt64,
    exact       Bool,
    error_bound UInt64
)
ENGINE = ReplacingMergeTree
ORDER BY (kind, window, computed_at, rank)
TTL toDateTime(computed_at) + INTERVAL 7 DAY;
