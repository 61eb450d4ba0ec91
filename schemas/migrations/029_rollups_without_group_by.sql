-- Views: the rollups' materialized views pass each row of view_rollup_input (a batch's views of an
-- item in a minute) on to their SummingMergeTree tables with its bucket, without a GROUP BY of
-- their own. The table's writer sorts every inserted block and sums the rows of equal keys in it
-- (optimize_on_insert, on by default), merges sum across parts, and every reader sums (the tables
-- were always read that way: a bucket's rows meet only in a merge). The GROUP BY was a second
-- aggregation of the same rows, by hash, in each of the three views: at a million distinct items,
-- where a flush sends about one row per view and almost none of them share a bucket, it made the
-- rollup INSERT about twice the cost of writing the three tables directly, the largest statement of
-- a flush. MODIFY QUERY swaps each view's query in place: no insert lands between two views.
ALTER TABLE views_by_minute_rollup MODIFY QUERY
SELECT item_id, toStartOfMinute(second) AS minute, views FROM view_rollup_input;
ALTER TABLE views_by_hour_rollup MODIFY QUERY
SELECT item_id, toStartOfHour(second) AS hour, views FROM view_rollup_input;
ALTER TABLE views_total_by_day_rollup MODIFY QUERY
SELECT item_id, toDate(second) AS day, views FROM view_rollup_input;
