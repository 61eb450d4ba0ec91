-- The dedupe window's state, one row per partition and batch: the (viewer, item) pair hashes the
-- batch counted and each one's event time, as arrays, tagged with the batch's end offset, and
-- the newest of the times for the retention. Written before the batch's deltas; a restart loads
-- the pairs of batches at or below the checkpoint (ARRAY JOIN). A row written again after a
-- failure is harmless (the load reads distinct pairs, and the latest time wins).
--
-- dedupe_state held a row per counted view ordered by its pair, a random hash: the engine
-- sorted every flush's rows by it and its merges rewrote them again and again, a tenth of the
-- all-in-one's CPU under a views load. Its rows move here, one row each, and age out by the
-- same retention.
CREATE TABLE IF NOT EXISTS dedupe_batches
(
    partition  UInt16,
    end_offset Int64,
    pairs      Array(UInt64) CODEC(NONE),
    last_ms    Array(Int64) CODEC(Delta, LZ4),
    newest_ms  Int64
)
ENGINE = MergeTree
ORDER BY (partition, end_offset)
TTL toDateTime(intDiv(newest_ms, 1000)) + INTERVAL 2 DAY;

-- Created again (empty) should this migration run again after its DROP went through.
CREATE TABLE IF NOT EXISTS dedupe_state
(
    partition  UInt16,
    end_offset Int64,
    pair       UInt64,
    last_ms    Int64
)
ENGINE = MergeTree
ORDER BY (partition, pair);

INSERT INTO dedupe_batches (partition, end_offset, pairs, last_ms, newest_ms)
SELECT partition, end_offset, [pair], [last_ms], last_ms FROM dedupe_state;

DROP TABLE IF EXISTS dedupe_state;
