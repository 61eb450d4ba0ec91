-- Views: rollups exact after kill -9 of ClickHouse itself, and fencing of zombie aggregators
-- (docs/EXACTLY_ONCE.md).
--
-- Materialized views on view_deltas wrote the rollups as separate parts inside the deltas
-- INSERT, with no envelope around the parts: a server killed in the middle kept the deltas and
-- lost rollup blocks, or the reverse. The aggregator now writes the rollups in an INSERT of its
-- own, into view_rollup_input (a Null table whose materialized views fill every rollup), only
-- after the deltas INSERT succeeded, and repairs the rollups of the batches it cannot vouch for
-- by comparing them with the deltas (the source of truth). A correction can be negative (a
-- zombie's batch undone), so the rollups' views are signed.
DROP VIEW IF EXISTS views_by_minute_mv;
DROP VIEW IF EXISTS views_by_hour_mv;
DROP VIEW IF EXISTS views_by_day_mv;
DROP VIEW IF EXISTS views_total_mv;
ALTER TABLE views_by_minute MODIFY COLUMN views Int64;
ALTER TABLE views_by_hour MODIFY COLUMN views Int64;
ALTER TABLE views_by_day MODIFY COLUMN views Int64;

-- All-time totals kept per item and day (no TTL), so that the rows of a recent batch can be
-- compared with the deltas like every other rollup. views_total becomes a view over it, with the
-- same columns as before. The old table's totals move in: the days the deltas still hold come
-- from the deltas, and the rest of each item's old total lands on 1970-01-01.
RENAME TABLE IF EXISTS views_total TO views_total_legacy;
-- Present when a re-run finds the old table already dropped: the copy below then reads nothing.
CREATE TABLE IF NOT EXISTS views_total_legacy (item_id String, views UInt64) ENGINE = Memory;
CREATE TABLE IF NOT EXISTS views_total_by_day (item_id String, day Date, views Int64)
ENGINE = SummingMergeTree ORDER BY (item_id, day);
INSERT INTO views_total_by_day
SELECT item_id, day, views FROM (
    SELECT item_id, toDate(second) AS day, toInt64(sum(views)) AS views
    FROM view_deltas WHERE item_id != '' GROUP BY item_id, day
    UNION ALL
    SELECT t.item_id AS item_id, toDate(0) AS day, toInt64(t.v) - toInt64(d.v) AS views
    FROM (SELECT item_id, sum(views) AS v FROM views_total_legacy GROUP BY item_id) AS t
    LEFT JOIN (SELECT item_id, sum(views) AS v FROM view_deltas WHERE item_id != '' GROUP BY item_id) AS d
    USING (item_id)
)
WHERE views != 0 AND (SELECT count() FROM views_total_by_day) = 0;
DROP TABLE IF EXISTS views_total_legacy;
CREATE VIEW IF NOT EXISTS views_total AS
SELECT item_id, sum(views) AS views FROM views_total_by_day GROUP BY item_id;

-- One INSERT of a flush's per-(item, second) views fills every rollup. It keeps nothing itself.
CREATE TABLE IF NOT EXISTS view_rollup_input (item_id String, second DateTime('UTC'), views Int64) ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_by_minute_rollup TO views_by_minute AS
SELECT item_id, toStartOfMinute(second) AS minute, sum(views) AS views FROM view_rollup_input GROUP BY item_id, minute;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_by_hour_rollup TO views_by_hour AS
SELECT item_id, toStartOfHour(second) AS hour, sum(views) AS views FROM view_rollup_input GROUP BY item_id, hour;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_by_day_rollup TO views_by_day AS
SELECT item_id, toDate(second) AS day, sum(views) AS views FROM view_rollup_input GROUP BY item_id, day;
CREATE MATERIALIZED VIEW IF NOT EXISTS views_total_by_day_rollup TO views_total_by_day AS
SELECT item_id, toDate(second) AS day, sum(views) AS views FROM view_rollup_input GROUP BY item_id, day;

-- The marker row of a batch carries the epoch of the claim it was written under and the end
-- offset up to which the partition's rollups were complete when it was written (-1: unknown,
-- as for markers from before this migration, whose batches are all checked once).
ALTER TABLE view_deltas ADD COLUMN IF NOT EXISTS epoch UInt64 DEFAULT 0;
ALTER TABLE view_deltas ADD COLUMN IF NOT EXISTS rolled_up_to Int64 DEFAULT -1;

-- One row per partition assignment: the new owner's epoch (the previous maximum + 1) and the
-- checkpoint it resumes from. A batch of an older epoch that ends beyond a later claim's start
-- was written by a zombie after the claim: it is not part of the checkpoint, and the owner
-- undoes it.
CREATE TABLE IF NOT EXISTS partition_claims
(
    partition    UInt16,
    epoch        UInt64,
    start_offset Int64,
    owner        String,
    claimed_at   DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (partition, epoch);

-- The items of every batch, written before the batch's deltas: it finds the rollup buckets a
-- batch touched (to repair them) and the batches of zombies (to undo them) without scanning the
-- deltas. A row for a batch whose deltas never arrived is harmless: its buckets compare equal.
CREATE TABLE IF NOT EXISTS batch_items
(
    partition  UInt16,
    end_offset Int64,
    epoch      UInt64,
    item_id    String,
    written_at DateTime('UTC')
)
ENGINE = MergeTree
ORDER BY (partition, epoch, end_offset, item_id)
TTL written_at + INTERVAL 8 DAY;
