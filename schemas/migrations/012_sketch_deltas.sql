-- Unique viewers: each sketch interval stores only the viewers added since (docs/EXACTLY_ONCE.md,
-- "Sketches: deltas and folds").
--
-- Until now every sketch interval rewrote every touched item's whole day and all-time sketch
-- into unique_viewers; a sketch grows with its item's viewers (up to 8 KiB dense), so the write
-- grew with every minute an item stayed busy. Now a sketch interval writes to
-- unique_viewer_deltas one small sketch per touched (item, day) holding the viewers added since
-- the last interval, tagged with the partition and the end offset it covers, and the estimate of
-- the whole sketch at that moment. The whole sketches in unique_viewers are rewritten ("folded")
-- at a longer interval, spread over it. The stored sketch of an item is the union of its
-- unique_viewers row and its deltas above the partition's fold checkpoint; a union never
-- counts a viewer twice, so a delta written again after a crash, or already folded, adds
-- nothing false.
CREATE TABLE IF NOT EXISTS unique_viewer_deltas
(
    partition  UInt16,
    end_offset Int64,
    item_id    String,
    day        Date,
    sketch     String,
    viewers    UInt64,
    written_at DateTime64(6, 'UTC')
)
ENGINE = MergeTree
ORDER BY (partition, item_id, day, end_offset)
TTL toDateTime(written_at) + INTERVAL 2 DAY;

-- Written like unique_viewers_claimed (migration 010): a displaced owner's deltas are dropped
-- inside the statement.
CREATE TABLE IF NOT EXISTS unique_viewer_deltas_claimed
(
    partition  UInt16,
    epoch      UInt64,
    end_offset Int64,
    item_id    String,
    day        Date,
    sketch     String,
    viewers    UInt64,
    written_at DateTime64(6, 'UTC')
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS unique_viewer_deltas_claimed_fence TO unique_viewer_deltas AS
SELECT partition, end_offset, item_id, day, sketch, viewers, written_at FROM unique_viewer_deltas_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);

-- Where the folds of each views partition are complete: every delta of the partition with an
-- end_offset at or below this is in the sketches of unique_viewers. A row is written after the
-- folds it vouches for; the highest end_offset wins. A folded delta serves nothing, so the
-- deltas are kept 2 days: far beyond the fold interval (at most a day), and an outage longer
-- than that loses the viewers of one fold interval from the sketches, not more.
CREATE TABLE IF NOT EXISTS sketch_folds
(
    partition  UInt16,
    end_offset Int64,
    written_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(end_offset)
ORDER BY partition;
CREATE TABLE IF NOT EXISTS sketch_folds_claimed
(
    partition  UInt16,
    epoch      UInt64,
    end_offset Int64,
    written_at DateTime64(3, 'UTC')
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS sketch_folds_claimed_fence TO sketch_folds AS
SELECT partition, end_offset, written_at FROM sketch_folds_claimed
WHERE (partition, epoch) NOT IN (SELECT partition, epoch FROM superseded_claims);

-- Before this migration the whole sketches held everything up to the sketch checkpoint.
INSERT INTO sketch_folds
SELECT partition, max(end_offset), now64(3)
FROM sketch_checkpoints WHERE partition NOT IN (SELECT partition FROM sketch_folds)
GROUP BY partition;

-- The newest estimate of each item's unique viewers per day (1970-01-01: all time): a delta row
-- carries the estimate of the whole sketch when it was written, a fold the same or a later one.
-- Readers of estimates (count reads, dashboards) read this rather than unique_viewers, whose
-- rows lag by up to the fold interval.
CREATE VIEW IF NOT EXISTS unique_viewers_latest AS
SELECT item_id, day, argMax(viewers, at) AS viewers, max(at) AS updated_at
FROM
(
    SELECT item_id, day, viewers, updated_at AS at FROM unique_viewers
    UNION ALL
    SELECT item_id, day, viewers, written_at AS at FROM unique_viewer_deltas
)
GROUP BY item_id, day;
