-- Each counted click's own offset in the clicks topic. Two clicks with the same id, ad and time
-- both count when the second arrives more than the dedupe window and grace behind the newest
-- click; without the offset the readers' DISTINCT (there to merge a replay's second copy of a
-- row) merged them into one, and the counted topic's catch-up published one click for two.
-- Rows written before have -1, and are read as before.
ALTER TABLE clicks_counted ADD COLUMN IF NOT EXISTS click_offset Int64 DEFAULT -1;
