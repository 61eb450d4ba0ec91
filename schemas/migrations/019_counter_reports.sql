-- Generic counters: the nightly recount of a namespace's day from the log (batchjob counters),
-- one version per run, namespace and date, never changed once written (as the click reports,
-- migration 007).
--
-- Rows first: one per counter with an add, a clear or a stored change stamped on the date. A run
-- that dies leaves rows of a version that has no row in counter_report_versions; nothing reads
-- them, and the next run takes a version above them, so they are never adopted. end_count is the
-- recount's end of day, stored the stream's (counter_deltas), before the stream's total before
-- the day.
CREATE TABLE IF NOT EXISTS counter_reports_daily
(
    ns          String,
    generation  UInt64,
    date        Date,
    version     UInt32,
    name        String,
    adds        Int64,
    clears      UInt32,
    duplicates  UInt64,
    end_count   Int64,
    before      Int64,
    stored      Int64,
    computed_at DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (ns, date, version, name);

-- One row per complete version, written after all its rows: a version exists for readers only
-- once this row does. Sums of its rows, and what the run read, for the record.
CREATE TABLE IF NOT EXISTS counter_report_versions
(
    ns           String,
    generation   UInt64,
    date         Date,
    version      UInt32,
    started_at   DateTime64(3, 'UTC'),
    computed_at  DateTime64(3, 'UTC'),
    counters     UInt64,
    differing    UInt64,
    adds         Int64,
    clears       UInt64,
    duplicates   UInt64,
    records_read UInt64,
    undecodable  UInt64
)
ENGINE = MergeTree
ORDER BY (ns, date, version);

-- The latest complete version of every namespace and date.
CREATE VIEW IF NOT EXISTS counter_reports_final AS
SELECT r.ns AS ns, r.generation AS generation, r.date AS date, r.version AS version, r.name AS name,
       r.adds AS adds, r.clears AS clears, r.duplicates AS duplicates, r.end_count AS end_count, r.stored AS stored,
       r.computed_at AS computed_at
FROM counter_reports_daily AS r
INNER JOIN (SELECT ns, date, max(version) AS version FROM counter_report_versions GROUP BY ns, date) AS v
    ON r.ns = v.ns AND r.date = v.date AND r.version = v.version;
