-- The daily click report by campaign and by device (batchjob clicks), beside its rows per ad
-- (migration 007): the same clicks, counted by the same rule, grouped by the campaign_id or the
-- device the click's first occurrence carried. Each dimension's rows of a version sum to the
-- version's totals. Written after the version's ad rows and before its row in
-- click_report_versions, so a version is visible with both or not at all.
CREATE TABLE IF NOT EXISTS click_reports_by
(
    date           Date,
    version        UInt32,
    dimension      LowCardinality(String),
    value          String,
    exact_count    UInt64,
    billable_count UInt64
)
ENGINE = MergeTree
ORDER BY (date, version, dimension, value);
