-- Clicks: the streaming path's provisional counts, exactly once (docs/EXACTLY_ONCE.md, "Clicks").
--
-- click_deltas holds, for each aggregator batch of one partition (of both co-partitioned topics
-- clicks and fraud_verdicts, up to clicks_end and verdicts_end), one row per (ad, minute) with the
-- clicks counted and the billable change in the batch (negative when a fraud verdict takes back
-- a click counted earlier), plus one marker row (ad_id = '') that is the partition's checkpoint:
-- both end offsets, the dedupe watermark, the claim epoch the batch was written under, and how
-- far the hour rollups were complete when it was written. One INSERT is one part: deltas and
-- checkpoint become visible together. Minute series are sums of these rows, read directly.
CREATE TABLE IF NOT EXISTS click_deltas
(
    partition       UInt16,
    epoch           UInt64,
    clicks_end      Int64,
    verdicts_end    Int64,
    watermark       DateTime64(3, 'UTC'),
    rolled_clicks   Int64,
    rolled_verdicts Int64,
    ad_id           String,
    minute          DateTime('UTC'),
    clicks          Int64,
    billable        Int64
)
ENGINE = MergeTree
ORDER BY (ad_id, minute, partition, clicks_end, verdicts_end)
TTL minute + INTERVAL 90 DAY;

-- Every counted click (after dedupe), tagged with the batch that counted it: the dedupe window
-- is restored from it, and a late fraud verdict finds the minute its click was counted in and
-- whether it was counted billable (score_over: its fraud_score was over the threshold). Written
-- before the batch's deltas; rows of batches beyond the checkpoint are ignored on load, and a
-- replay writes the same facts again (read with DISTINCT).
CREATE TABLE IF NOT EXISTS clicks_counted
(
    partition    UInt16,
    clicks_end   Int64,
    verdicts_end Int64,
    ad_id        String,
    click_id     String,
    ts           DateTime64(3, 'UTC'),
    score_over   UInt8
)
ENGINE = MergeTree
ORDER BY (partition, click_id, ts)
TTL toDateTime(ts) + INTERVAL 8 DAY;

-- Every fraud verdict applied, tagged like clicks_counted: per click id the latest decided_at
-- (then fraud over valid) wins. held_from is the partition's click watermark when the verdict
-- was processed: a verdict is matched to clicks arriving after it while it is held.
CREATE TABLE IF NOT EXISTS click_verdicts
(
    partition    UInt16,
    clicks_end   Int64,
    verdicts_end Int64,
    click_id     String,
    ad_id        String,
    verdict      UInt8,
    reason       String,
    decided_at   DateTime64(3, 'UTC'),
    held_from    Int64
)
ENGINE = MergeTree
ORDER BY (partition, click_id)
TTL toDateTime(decided_at) + INTERVAL 8 DAY;

-- Hour rollups: the full value of each (ad, hour), recomputed from click_deltas and written
-- whole (never incremented), so writing it again is harmless. version grows with the
-- partition's checkpoint; readers use FINAL (or argMax by version).
CREATE TABLE IF NOT EXISTS clicks_by_hour
(
    ad_id    String,
    hour     DateTime('UTC'),
    clicks   Int64,
    billable Int64,
    version  UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (ad_id, hour)
TTL hour + INTERVAL 730 DAY;

-- Day rollups are the sums of their hours.
CREATE VIEW IF NOT EXISTS clicks_by_day AS
SELECT ad_id, toDate(hour) AS day, sum(clicks) AS clicks, sum(billable) AS billable
FROM clicks_by_hour FINAL
GROUP BY ad_id, day;

-- One row per assignment of a click partition (the views' partition_claims, for the click
-- path's partitions): the new owner's epoch and the checkpoint it resumes from. A writer checks
-- before every deltas INSERT that no newer claim exists.
CREATE TABLE IF NOT EXISTS click_partition_claims
(
    partition     UInt16,
    epoch         UInt64,
    start_clicks  Int64,
    start_verdicts Int64,
    owner         String,
    claimed_at    DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (partition, epoch);
