-- Views: exactly-once per-second totals (see docs/EXACTLY_ONCE.md).
--
-- view_deltas holds, for each aggregator batch (one Kafka partition, offsets up to end_offset),
-- one row per (item, second) with the views counted in that batch, plus one marker row
-- (item_id = '') per partition and batch that is the checkpoint: the largest end_offset of a
-- partition is where its consumer resumes. A batch is one INSERT block into one table part, so
-- its rows and its marker become visible together or not at all. Totals are sums of deltas; no
-- row is ever updated, so nothing depends on merges.
CREATE TABLE IF NOT EXISTS view_deltas
(
    partition  UInt16,
    end_offset Int64,
    watermark  DateTime64(3, 'UTC'),
    item_id    String,
    second     DateTime('UTC'),
    views      UInt64
)
ENGINE = MergeTree
ORDER BY (item_id, second, partition, end_offset)
TTL second + INTERVAL 7 DAY;

CREATE VIEW IF NOT EXISTS views_by_second AS
SELECT item_id, second, sum(views) AS views
FROM view_deltas
WHERE item_id != ''
GROUP BY item_id, second;

-- Rollups, filled by materialized views in the same INSERT as the deltas. SummingMergeTree
-- compacts in the background; readers still sum(), so merges never change an answer.
CREATE TABLE IF NOT EXISTS views_by_minute (item_id String, minute DateTime('UTC'), views UInt64)
ENGINE = SummingMergeTree ORDER BY (item_id, minute) TTL minute + INTERVAL 90 DAY;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_by_minute_mv TO views_by_minute AS
SELECT item_id, toStartOfMinute(second) AS minute, sum(views) AS views
FROM view_deltas WHERE item_id != '' GROUP BY item_id, minute;

CREATE TABLE IF NOT EXISTS views_by_hour (item_id String, hour DateTime('UTC'), views UInt64)
ENGINE = SummingMergeTree ORDER BY (item_id, hour) TTL hour + INTERVAL 730 DAY;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_by_hour_mv TO views_by_hour AS
SELECT item_id, toStartOfHour(second) AS hour, sum(views) AS views
FROM view_deltas WHERE item_id != '' GROUP BY item_id, hour;

CREATE TABLE IF NOT EXISTS views_by_day (item_id String, day Date, views UInt64)
ENGINE = SummingMergeTree ORDER BY (item_id, day) TTL day + INTERVAL 730 DAY;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_by_day_mv TO views_by_day AS
SELECT item_id, toDate(second) AS day, sum(views) AS views
FROM view_deltas WHERE item_id != '' GROUP BY item_id, day;

-- All-time totals outlive every rollup's retention.
CREATE TABLE IF NOT EXISTS views_total (item_id String, views UInt64)
ENGINE = SummingMergeTree ORDER BY item_id;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_total_mv TO views_total AS
SELECT item_id, sum(views) AS views FROM view_deltas WHERE item_id != '' GROUP BY item_id;

-- The dedupe window's state: for each counted view, its (viewer, item) pair hash and event
-- time, tagged with the batch that counted it. Written before the batch's deltas; a restart
-- loads rows of batches at or below the checkpoint. Duplicated rows are harmless (max wins).
CREATE TABLE IF NOT EXISTS dedupe_state
(
    partition  UInt16,
    end_offset Int64,
    pair       UInt64,
    last_ms    Int64
)
ENGINE = MergeTree
ORDER BY (partition, pair)
TTL toDateTime(intDiv(last_ms, 1000)) + INTERVAL 2 DAY;

-- Unique viewers: one HyperLogLog sketch (axiomhq, precision 14) per item and day, and per item
-- for all time (day = 1970-01-01). Each write holds the full merged sketch, a superset of the
-- previous one, so the newest version is the answer; viewers is its estimate for dashboards.
CREATE TABLE IF NOT EXISTS unique_viewers
(
    item_id    String,
    day        Date,
    sketch     String,
    viewers    UInt64,
    updated_at DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY (item_id, day);
