-- Unique viewers of views per item and minute (docs/API.md, "Views"; package schemas/viewerhours).
-- The rows of unique_viewers_by_hour also carry each minute's registers, keyed minute of the
-- hour << 14 | register, so one maxMap per (item, hour) keeps its 60 minutes: a minute costs no
-- row of its own (at a million items nearly every view is a row per table, and a row per
-- (item, minute) beside each hour's cost a quarter of the counted rate), only its pairs in the
-- row the hour writes anyway. The column expires on its own, as views_by_minute does
-- (aggregator.ttl_minutes), leaving the hour's registers. Rows written before it carry none.
ALTER TABLE unique_viewers_by_hour
    ADD COLUMN IF NOT EXISTS minutes SimpleAggregateFunction(maxMap, Tuple(Array(UInt32), Array(UInt8)))
    TTL hour + INTERVAL 90 DAY;
