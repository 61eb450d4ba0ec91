-- Views: rollup writes of an aggregator that lost its partition change nothing (docs/EXACTLY_ONCE.md,
-- "Zombies are fenced by claims").
--
-- An owner that stalls past the session timeout may send a rollup INSERT after the next owner
-- claimed the partition and repaired its rollups from the deltas: counted twice. The check of
-- the claims before the INSERT cannot close that gap from the client (the stall falls between
-- check and INSERT), so the check moves into the statement: the aggregator writes its rollups
-- here, tagged with the partition and the epoch it writes under, and rows reach
-- view_rollup_input (whose materialized views fill the rollups) only while no newer claim of
-- the partition exists: the same rule as the aggregator's own check, which also lets an owner
-- whose claim row is gone (a database re-created empty) go on writing. The repair's INSERTs
-- carry the same condition.
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
WHERE (partition, epoch) NOT IN (
    SELECT partition, epoch FROM partition_claims
    WHERE (partition, epoch) NOT IN (SELECT partition, max(epoch) FROM partition_claims GROUP BY partition)
);
