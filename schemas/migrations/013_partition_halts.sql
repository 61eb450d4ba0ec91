-- Partitions halted at assignment because their checkpoint and the Kafka log disagree, and the
-- operators' decisions to resume them (docs/OPERATIONS.md, "A halted partition").
--
-- A checkpoint beyond the log's end means the log lost records it had acknowledged (a broker
-- lost unsynced writes, or the topic was deleted and re-created): the offsets it hands out next
-- look already counted. A checkpoint before the log's start means retention deleted records
-- before they were counted. Either way the aggregator stops that partition instead of going on
-- with numbers that are quietly wrong, records the halt here, and waits for a decision naming
-- the same checkpoint: `aggregator resume` writes it, and every later assignment that finds the
-- same disagreement at the same checkpoint follows it.
CREATE TABLE IF NOT EXISTS partition_halts
(
    topic      LowCardinality(String),
    partition  Int32,
    checkpoint Int64,
    log_start  Int64,
    log_end    Int64,
    reason     LowCardinality(String),
    owner      String,
    halted_at  DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (topic, partition, checkpoint, halted_at);

CREATE TABLE IF NOT EXISTS partition_resumes
(
    topic      LowCardinality(String),
    partition  Int32,
    checkpoint Int64,
    resume     LowCardinality(String),
    log_start  Int64,
    log_end    Int64,
    note       String,
    decided_by String,
    decided_at DateTime64(3, 'UTC')
)
ENGINE = MergeTree
ORDER BY (topic, partition, checkpoint, decided_at);
