-- The nightly views recount (batchjob views --date D): the day's views counted again from the
-- sink's files with the streaming dedupe rule, compared per item with the streaming totals
-- (views_total_by_day). Versioned like the like reconciliation: a run adds version N+1 and no
-- earlier report changes; the run row is written last, so a version without one did not finish.
CREATE TABLE IF NOT EXISTS view_recount_runs
(
    version       UInt64,
    started_at    DateTime64(3, 'UTC'),
    finished_at   DateTime64(3, 'UTC'),
    day           Date,
    source        LowCardinality(String),
    records       UInt64,
    counted       UInt64,
    items_checked UInt64,
    differences   UInt64
)
ENGINE = MergeTree
ORDER BY version;

-- One row per item whose recount differs from the streaming total: files is the recount,
-- clickhouse the streaming total, diff = clickhouse - files.
CREATE TABLE IF NOT EXISTS view_recount_diffs
(
    version    UInt64,
    day        Date,
    item_id    String,
    files      Int64,
    clickhouse Int64,
    diff       Int64
)
ENGINE = MergeTree
ORDER BY (version, item_id);
