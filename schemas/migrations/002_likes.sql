-- Likes: the like log (Kafka topic likes) loaded for dashboards, and the nightly job's
-- reconciliation reports. The log is the source of truth; these rows are derived from it.
--
-- One row per log record, loaded by the aggregator's likes loader (at least once: a replay
-- writes identical rows again). ReplacingMergeTree(offset) keeps, per (item, user), the row of
-- the highest offset, which is the last record of the pair in log order (all records of an
-- item are in one partition). Merges are eventual: reads use FINAL (or argMax by offset).
CREATE TABLE IF NOT EXISTS likes
(
    item_id   String,
    user_id   String,
    liked     UInt8,
    partition UInt16,
    offset    Int64,
    ts        DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(offset)
ORDER BY (item_id, user_id);

-- Exact like total per item, for dashboards.
CREATE VIEW IF NOT EXISTS like_totals AS
SELECT item_id, toInt64(sum(liked)) AS likes
FROM likes FINAL
GROUP BY item_id;

-- One row per run of `batchjob likes`; version is the previous maximum + 1, so a rerun adds a
-- new version and no earlier report ever changes. The row is written last: a run without one
-- did not finish.
CREATE TABLE IF NOT EXISTS like_reconciliation_runs
(
    version       UInt64,
    started_at    DateTime64(3, 'UTC'),
    finished_at   DateTime64(3, 'UTC'),
    scope         String,
    items_checked UInt64,
    differences   UInt64,
    repaired      UInt64
)
ENGINE = MergeTree
ORDER BY version;

-- One row per item and store (redis or clickhouse) that disagreed with the log: totals over
-- the pairs compared (pairs changed after the run's log snapshot are left to the next run).
CREATE TABLE IF NOT EXISTS like_reconciliation_diffs
(
    version  UInt64,
    item_id  String,
    source   LowCardinality(String),
    expected Int64,
    actual   Int64,
    diff     Int64,
    repaired UInt8
)
ENGINE = MergeTree
ORDER BY (version, source, item_id);
