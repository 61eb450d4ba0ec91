-- Views dedupe state: vouched for by the sketch checkpoint (docs/EXACTLY_ONCE.md, "Dedupe state
-- survives restarts").
--
-- Until now every flush wrote its counted pairs to dedupe_state before its deltas, so that the
-- deltas checkpoint vouched for them, and the flush's views waited for that statement before
-- they were readable. Now a flush writes them after its batch is readable, and the sketch
-- checkpoint, written after, vouches for the rows at or below it; its row also carries the
-- dedupe window's watermark at its offset. A new owner restores the window at the sketch
-- checkpoint and replays the records from there to the deltas checkpoint into the window only
-- (it replays them into the sketches already): the window's answers are a function of the log,
-- so the replay rebuilds it exactly. A row written before this migration has no watermark
-- (NULL): that partition's state is complete up to its deltas checkpoint, and is restored there,
-- as before.
ALTER TABLE sketch_checkpoints ADD COLUMN IF NOT EXISTS watermark_ms Nullable(Int64);
ALTER TABLE sketch_checkpoints_claimed ADD COLUMN IF NOT EXISTS watermark_ms Nullable(Int64);
DROP VIEW IF EXISTS sketch_checkpoints_claimed_fence;
CREATE MATERIALIZED VIEW IF NOT EXISTS sketch_checkpoints_claimed_fence TO sketch_checkpoints AS
SELECT partition, end_offset, written_at, watermark_ms FROM sketch_checkpoints_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);
