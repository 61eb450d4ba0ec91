-- Views: the derived writes of an aggregator that lost its partition change nothing
-- (docs/EXACTLY_ONCE.md, "Zombies are fenced by claims").
--
-- An owner that stalls past the session timeout may still send writes after the next owner
-- claimed the partition: a rollup INSERT of a batch whose rollups the new owner has already
-- repaired from the deltas (counted twice), a repair landing between the new owner's deltas and
-- rollups (counted twice), or its sketches, stale but stamped later than the new owner's, with
-- a sketch checkpoint beyond what they hold (viewers lost for good once the next owner loads
-- them and resumes at that checkpoint). A check by the writer cannot close these gaps (the
-- stall falls between check and write), so the check moves into the statement: these writes go
-- into Null tables, tagged with the partition and the epoch they are written under, whose
-- materialized views pass the rows on only while no newer claim of the partition exists (the
-- aggregator's own rule, which also lets an owner whose claim row is gone, in a database
-- re-created empty, go on writing). The rollup repair's INSERTs carry the same condition.

-- Every claim that a later claim of its partition superseded: a write under one of these
-- (partition, epoch) pairs comes from an owner that lost the partition.
CREATE VIEW IF NOT EXISTS superseded_claims AS
SELECT partition, epoch FROM partition_claims
WHERE (partition, epoch) NOT IN (SELECT partition, max(epoch) FROM partition_claims GROUP BY partition);

CREATE TABLE IF NOT EXISTS view_rollup_claimed
(
    partition UInt16,
    epoch     UInt64,
    item_id   String,
    second    DateTime('UTC'),
    views     Int64
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS view_rollup_claimed_fence TO view_rollup_input AS
SELECT item_id, second, views FROM view_rollup_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);

CREATE TABLE IF NOT EXISTS unique_viewers_claimed
(
    partition  UInt16,
    epoch      UInt64,
    item_id    String,
    day        Date,
    sketch     String,
    viewers    UInt64,
    updated_at DateTime64(6, 'UTC')
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS unique_viewers_claimed_fence TO unique_viewers AS
SELECT item_id, day, sketch, viewers, updated_at FROM unique_viewers_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);

CREATE TABLE IF NOT EXISTS sketch_checkpoints_claimed
(
    partition  UInt16,
    epoch      UInt64,
    end_offset Int64,
    written_at DateTime64(3, 'UTC')
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS sketch_checkpoints_claimed_fence TO sketch_checkpoints AS
SELECT partition, end_offset, written_at FROM sketch_checkpoints_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);
