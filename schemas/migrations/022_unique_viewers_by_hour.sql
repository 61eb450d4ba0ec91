-- Unique viewers of views per item and hour (docs/API.md, "Views"; package schemas/viewerhours).
-- Each sketch interval the views aggregators write, per (item, hour) their views touched, the
-- HyperLogLog registers those views set (register -> rank, sparse). A union of HyperLogLogs is
-- each register's maximum: maxMap, which the table applies to the rows of an (item, hour) as it
-- merges parts, and readers to the rows not merged yet, so an hour needs no fold. The rows are
-- stored as sent (a SimpleAggregateFunction builds no state at insert: the insert costs what
-- storing the arrays does). A register sent twice (a replay after a crash) or by a displaced
-- owner (for a viewer really seen) changes nothing false, so no claim fences the rows. The
-- aggregator keeps them as long as views_by_hour (aggregator.ttl_days).
CREATE TABLE IF NOT EXISTS unique_viewers_by_hour
(
    item_id   String,
    hour      DateTime('UTC'),
    registers SimpleAggregateFunction(maxMap, Tuple(Array(UInt16), Array(UInt8)))
)
ENGINE = AggregatingMergeTree
ORDER BY (item_id, hour)
TTL hour + INTERVAL 730 DAY;
