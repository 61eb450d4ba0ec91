-- Views: the sketch and fold checkpoints keep the epoch they were written under, so that a
-- claim that finds no deltas checkpoint takes them as proof of written batches only when the
-- claims leave them valid (docs/EXACTLY_ONCE.md, "A claim without a checkpoint").
--
-- The fence of migration 010 drops a displaced owner's checkpoint inside the statement, but
-- only once the claim that displaced it is written: a claim reads the checkpoints, then writes
-- its row, and a zombie's checkpoint landing in between (tens of milliseconds) passes. Its
-- offset can lie beyond the claim's start, above batches the claims undo; a later claim that
-- found no deltas checkpoint took it as proof that those batches were written and started
-- above them, and their views were counted by nobody. With the epoch, that checkpoint is
-- invalid by the claims as a batch of its epoch ending there is. Rows from before this
-- migration carry epoch 0 and are trusted as before. The sketches themselves may still resume
-- at such a checkpoint: the zombie's sketch deltas hold real viewers of real records.
ALTER TABLE sketch_checkpoints ADD COLUMN IF NOT EXISTS epoch UInt64 DEFAULT 0;
DROP VIEW IF EXISTS sketch_checkpoints_claimed_fence;
CREATE MATERIALIZED VIEW IF NOT EXISTS sketch_checkpoints_claimed_fence TO sketch_checkpoints AS
SELECT partition, epoch, end_offset, written_at FROM sketch_checkpoints_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);
ALTER TABLE sketch_folds ADD COLUMN IF NOT EXISTS epoch UInt64 DEFAULT 0;
DROP VIEW IF EXISTS sketch_folds_claimed_fence;
CREATE MATERIALIZED VIEW IF NOT EXISTS sketch_folds_claimed_fence TO sketch_folds AS
SELECT partition, epoch, end_offset, written_at FROM sketch_folds_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);
