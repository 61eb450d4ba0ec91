-- Where the unique-viewer sketches of each views partition are complete: every record of the
-- partition below end_offset is in the sketches stored in unique_viewers. The aggregator writes
-- sketches less often than deltas (aggregator.sketch_interval), so after a crash it resumes at
-- the lower of this and the deltas checkpoint and replays the records in between into the
-- sketches only; inserting a viewer into a sketch again changes nothing.
-- A row is written after the sketches it vouches for; the highest end_offset wins.
CREATE TABLE IF NOT EXISTS sketch_checkpoints
(
    partition  UInt16,
    end_offset Int64,
    written_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(end_offset)
ORDER BY partition;

-- Before this table, sketches were written in every flush, together with the deltas: where
-- tables from then exist, the sketches are complete up to the deltas checkpoint. Running this
-- again only adds rows with the same offsets.
INSERT INTO sketch_checkpoints
SELECT partition, max(end_offset), now64(3)
FROM view_deltas WHERE item_id = ''
GROUP BY partition;
