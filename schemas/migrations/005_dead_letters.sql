-- Data set aside instead of counted or loaded: a Kafka record that does not decode or fails the
-- checks a reader of the log applies (schemas.DecodeView), or a stored row that does not read
-- back (a unique_viewers sketch that is not a precision-14 HyperLogLog). Counting goes on
-- without it; this table is where an operator finds what was skipped and why.
--
-- source is the topic or table the data came from. A record is named by its partition and
-- offset; a table row by ref (e.g. item_id and day) with partition -1 and offset the row's
-- version (updated_at in microseconds). The decision to set a record aside is a pure function
-- of the record, so a replay writes the same rows again: ReplacingMergeTree keeps one per key.
-- payload holds the bad bytes, cut at 64 KiB.
CREATE TABLE IF NOT EXISTS dead_letters
(
    source    LowCardinality(String),
    partition Int32,
    offset    Int64,
    ref       String,
    reason    String,
    payload   String,
    seen_at   DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(seen_at)
ORDER BY (source, partition, offset, ref)
TTL toDateTime(seen_at) + INTERVAL 90 DAY;
