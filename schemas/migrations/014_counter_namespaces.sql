-- Generic counters: the namespaces (docs/API.md, "Generic counters"). One row per change of a
-- namespace, the latest (by version, the change's time in nanoseconds) wins; a deletion is a row
-- with deleted = 1. generation is the version the namespace was created at: the counters of a
-- namespace deleted and created again under its name start from zero. Every collector holds the
-- whole table in memory and reads it again every second (and when asked for a namespace it does
-- not hold), so a change reaches the other collectors within about a second.
CREATE TABLE IF NOT EXISTS counter_namespaces
(
    name               String,
    mode               LowCardinality(String),
    retention_s        UInt64,
    idempotency_s      UInt64,
    writers            Array(String),
    readers            Array(String),
    generation         UInt64,
    deleted            UInt8,
    version            UInt64,
    changed_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(version)
ORDER BY name;
