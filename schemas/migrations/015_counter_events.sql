-- Generic counters in mode eventual: the counting engine's exactly-once tables for the
-- counter_events topic (docs/EXACTLY_ONCE.md, "Generic counters"), in the views' and clicks'
-- shape.
--
-- counter_deltas holds, for each batch of one partition, one row per (counter, minute) with the
-- sum of the adds counted in it, plus one marker row (ns = '') that is the partition's
-- checkpoint: the batch's end offset and the claim epoch it was written under. One INSERT is one
-- part: deltas and checkpoint become visible together. A counter is the sum of its rows; each
-- row expires the counter's namespace retention after its minute, a marker 30 days after its
-- batch.
CREATE TABLE IF NOT EXISTS counter_deltas
(
    partition  UInt16,
    epoch      UInt64,
    end_offset Int64,
    ns         String,
    generation UInt64,
    name       String,
    minute     DateTime('UTC'),
    delta      Int64,
    expires    DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY (ns, generation, name, minute, partition, end_offset)
TTL expires;

-- One row per assignment of a counter_events partition: the new owner's epoch and the
-- checkpoint it resumes from (package fence).
CREATE TABLE IF NOT EXISTS counter_partition_claims
(
    partition    UInt16,
    epoch        UInt64,
    start_offset Int64,
    owner        String,
    claimed_at   DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (partition, epoch);

CREATE VIEW IF NOT EXISTS counter_superseded_claims AS
SELECT partition, epoch FROM counter_partition_claims
WHERE (partition, epoch) NOT IN (SELECT partition, max(epoch) FROM counter_partition_claims GROUP BY partition);

-- A batch goes in through this Null table and reaches counter_deltas only while no newer claim of
-- its partition exists (migration 011 for the views): a displaced owner's batch changes nothing.
CREATE TABLE IF NOT EXISTS counter_deltas_claimed
(
    partition  UInt16,
    epoch      UInt64,
    end_offset Int64,
    ns         String,
    generation UInt64,
    name       String,
    minute     DateTime('UTC'),
    delta      Int64,
    expires    DateTime('UTC')
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS counter_deltas_claimed_fence TO counter_deltas AS
SELECT partition, epoch, end_offset, ns, generation, name, minute, delta, expires FROM counter_deltas_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM counter_superseded_claims);

-- The dedupe state: every token counted, tagged with its batch, and per batch one row (key = 0)
-- per idempotency window with the window's watermark at the batch's end. Written before the
-- batch's deltas; rows of batches beyond the checkpoint, or that the fence makes invalid, are
-- ignored on load, and a replay writes the same rows again. Kept past the longest window (7
-- days) and its grace.
CREATE TABLE IF NOT EXISTS counter_tokens
(
    partition  UInt16,
    epoch      UInt64,
    end_offset Int64,
    window_ms  Int64,
    key        UInt64,
    ts         DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (partition, end_offset, window_ms, key)
TTL toDateTime(ts) + INTERVAL 8 DAY;
