-- views_by_day held the rows views_total_by_day holds (both filled from view_rollup_input with
-- the same key and sum), only with a retention; filling both cost every flush a fourth GROUP BY
-- and a fourth part, the most of any write at a million items. It becomes a view of
-- views_total_by_day with the same columns, so a day's views stay as long as the all-time totals
-- (no retention of their own) and its readers read as before. 1970-01-01 is left out: there
-- views_total_by_day keeps the totals migration 004 found older than the deltas, no day's views.
DROP VIEW IF EXISTS views_by_day_rollup;
DROP TABLE IF EXISTS views_by_day;
CREATE VIEW IF NOT EXISTS views_by_day AS
SELECT item_id, day, views FROM views_total_by_day WHERE day > toDate(0);
