-- Generic counters: counter_checkpoints keeps the epoch of the marker it holds, so that an
-- accurate read takes it as its checkpoint only when the claims leave that batch valid
-- (docs/EXACTLY_ONCE.md, "Generic counters").
--
-- A displaced owner's batch that passed its fence check just before the new owner's claim row
-- lands after the claim; its marker reached this table, which keeps the highest end offset of a
-- partition whatever the claims say, and an accurate read summed the rows up to it (the new
-- owner's replay had not reached it) and read the log after it: the records in between were in
-- neither. With the epoch the read knows that marker for a zombie's and falls back to the newest
-- claim's start, the end of a batch the claims leave valid. Rows from before this migration
-- carry epoch 0 and are trusted as before. A marker landing while the view is re-created is
-- missed: the table then holds an older checkpoint until the next batch, which a read may use as
-- well (it reads more of the log).
ALTER TABLE counter_checkpoints ADD COLUMN IF NOT EXISTS epoch UInt64 DEFAULT 0;
DROP VIEW IF EXISTS counter_checkpoints_fill;
CREATE MATERIALIZED VIEW IF NOT EXISTS counter_checkpoints_fill TO counter_checkpoints AS
SELECT partition, end_offset, epoch FROM counter_deltas WHERE ns = '';
