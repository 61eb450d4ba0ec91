-- Exactly one claim per (partition, epoch): a claim's INSERT carries the partition and epoch as
-- its deduplication token, and these tables keep the tokens of their last inserts, so a second
-- claimant of an epoch (it read the claims before the first one recorded its own) has its row
-- dropped, reads back the winner's and starts over one epoch higher (package fence, Acquire).
-- Two claims of one epoch would both count as current, and the one starting lower would make
-- invalid batches that the other's checkpoint counts as done. Replicated tables keep the tokens
-- in Keeper (replicated_deduplication_window) and need no setting.
ALTER TABLE partition_claims MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE click_partition_claims MODIFY SETTING non_replicated_deduplication_window = 1000;
ALTER TABLE counter_partition_claims MODIFY SETTING non_replicated_deduplication_window = 1000;
