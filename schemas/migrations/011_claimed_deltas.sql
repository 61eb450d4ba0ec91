-- Views: the deltas INSERT of an aggregator that lost its partition changes nothing
-- (docs/EXACTLY_ONCE.md, "Zombies are fenced by claims").
--
-- The writer checks the claims before its deltas INSERT, but a stall past the session timeout
-- between that check and the INSERT let a displaced owner's batch land after the new owner's
-- claim; the new owner then had to find and undo it, and an owner change before it looked could
-- leave it in place. The check moves into the statement, as migration 010 did for the derived
-- writes: the batch (its deltas and its checkpoint marker, one block) goes into a Null table and
-- reaches view_deltas only while no newer claim of its partition exists. The block still lands
-- in view_deltas as one part, so a batch and its marker stay visible together or not at all.
CREATE TABLE IF NOT EXISTS view_deltas_claimed
(
    partition    UInt16,
    end_offset   Int64,
    watermark    DateTime64(3, 'UTC'),
    item_id      String,
    second       DateTime('UTC'),
    views        UInt64,
    epoch        UInt64,
    rolled_up_to Int64
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS view_deltas_claimed_fence TO view_deltas AS
SELECT partition, end_offset, watermark, item_id, second, views, epoch, rolled_up_to FROM view_deltas_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);
