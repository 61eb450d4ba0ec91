-- Generic counters in mode accurate (docs/API.md, "Generic counters"): a read adds the log's
-- records after the checkpoint to the counted total, and must skip a retried add whose first copy
-- was counted before the checkpoint. counter_tokens is ordered by batch, for the aggregators'
-- loads; this copy of its tokens, filled as they are written, is ordered by key, so that a read
-- finds a few hundred tokens by key among days of them. Window watermark rows (key = 0) stay out.
-- Nothing is copied from before: accurate namespaces, the index's only readers, came with it.
CREATE TABLE IF NOT EXISTS counter_token_index
(
    partition  UInt16,
    key        UInt64,
    end_offset Int64,
    window_ms  Int64,
    ts         DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (partition, key)
TTL toDateTime(ts) + INTERVAL 8 DAY
-- A lookup reads a granule per key: small granules keep that cheap.
SETTINGS index_granularity = 1024;

CREATE MATERIALIZED VIEW IF NOT EXISTS counter_token_index_fill TO counter_token_index AS
SELECT partition, key, end_offset, window_ms, ts FROM counter_tokens WHERE key != 0;


-- Each counter_events partition's checkpoint, the end offset of its last batch, kept as long as
-- the pipeline runs: the markers in counter_deltas expire after 30 days, and finding a busy
-- partition's newest among them scans all of the partition's markers. Filled from the markers
-- as they reach counter_deltas (a batch the fence drops never does); the copy from the markers
-- already there may meet rows the view wrote, which the engine folds by end offset.
CREATE TABLE IF NOT EXISTS counter_checkpoints
(
    partition  UInt16,
    end_offset Int64
)
ENGINE = ReplacingMergeTree(end_offset)
ORDER BY partition;

CREATE MATERIALIZED VIEW IF NOT EXISTS counter_checkpoints_fill TO counter_checkpoints AS
SELECT partition, end_offset FROM counter_deltas WHERE ns = '';

INSERT INTO counter_checkpoints SELECT partition, max(end_offset) FROM counter_deltas WHERE ns = '' GROUP BY partition;
