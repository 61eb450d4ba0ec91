-- Generic counters: distinct counts (docs/API.md, "Distinct counts"). Every member added to an
-- eventual counter goes in, tagged with its hour, through the Null table, whose materialized view
-- keeps one mergeable sketch per counter and hour (uniqCombined64, whose error ClickHouse states
-- and TestDistinctCounts measures). Adding a member again changes nothing, so a replayed batch,
-- or a displaced owner's, needs no fence. A range's count merges its hours' sketches. Each hour
-- expires the namespace's retention after it.
CREATE TABLE IF NOT EXISTS counter_distinct
(
    ns         String,
    generation UInt64,
    name       String,
    hour       DateTime('UTC'),
    members    AggregateFunction(uniqCombined64, String),
    expires    SimpleAggregateFunction(max, DateTime('UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (ns, generation, name, hour)
TTL expires;

CREATE TABLE IF NOT EXISTS counter_distinct_input
(
    ns         String,
    generation UInt64,
    name       String,
    hour       DateTime('UTC'),
    member     String,
    expires    DateTime('UTC')
)
ENGINE = Null;
CREATE MATERIALIZED VIEW IF NOT EXISTS counter_distinct_fill TO counter_distinct AS
SELECT ns, generation, name, hour, uniqCombined64State(member) AS members, max(expires) AS expires
FROM counter_distinct_input GROUP BY ns, generation, name, hour;
