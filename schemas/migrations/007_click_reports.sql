-- Exact daily click counts per ad, written by the nightly job (batchjob clicks) from the raw
-- log: one version per run and date, never changed once written.
--
-- Rows first: one per ad with a click on the date, under the run's version. A run that dies
-- leaves rows of a version that has no row in click_report_versions; nothing reads them, and
-- the next run takes a version above them, so they are never adopted.
CREATE TABLE IF NOT EXISTS click_reports_daily
(
    date           Date,
    version        UInt32,
    ad_id          String,
    exact_count    UInt64,
    billable_count UInt64,
    computed_at    DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (date, version, ad_id);

-- One row per complete version, written after all its rows: a version exists for readers
-- (the billing API, dashboards) only once this row does, so no one ever sees part of one.
-- Sums of its rows, and what the run read and left out, for the record.
CREATE TABLE IF NOT EXISTS click_report_versions
(
    date           Date,
    version        UInt32,
    started_at     DateTime64(3, 'UTC'),
    computed_at    DateTime64(3, 'UTC'),
    source         LowCardinality(String),
    ads            UInt64,
    exact_count    UInt64,
    billable_count UInt64,
    duplicates     UInt64,
    fraud          UInt64,
    records_read   UInt64
)
ENGINE = MergeTree
ORDER BY (date, version);

-- The latest complete version of every date, for dashboards: the numbers billing reads.
CREATE VIEW IF NOT EXISTS click_reports_final AS
SELECT r.date AS date, r.version AS version, r.ad_id AS ad_id, r.exact_count AS exact_count,
       r.billable_count AS billable_count, r.computed_at AS computed_at
FROM click_reports_daily AS r
INNER JOIN (SELECT date, max(version) AS version FROM click_report_versions GROUP BY date) AS v
    ON r.date = v.date AND r.version = v.version;
