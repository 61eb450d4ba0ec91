-- Click series by campaign and by device as well as by ad (docs/API.md, "Clicks").
--
-- A click counts under its ad, its campaign_id and its device at once, so the streaming path
-- keeps its deltas per (ad, campaign_id, device, minute): an ad's minute is the sum of its rows
-- as before, a campaign's or a device's the sum of the rows that carry it. Rows written before
-- have both empty and count for their ad only. A counted click keeps its campaign and device,
-- so that a late fraud verdict corrects the rows the click was counted in.
ALTER TABLE click_deltas ADD COLUMN IF NOT EXISTS campaign_id String DEFAULT '', ADD COLUMN IF NOT EXISTS device String DEFAULT '';
ALTER TABLE click_deltas ADD INDEX IF NOT EXISTS campaign_idx campaign_id TYPE bloom_filter GRANULARITY 1;
ALTER TABLE click_deltas ADD INDEX IF NOT EXISTS device_idx device TYPE bloom_filter GRANULARITY 1;
ALTER TABLE clicks_counted ADD COLUMN IF NOT EXISTS campaign_id String DEFAULT '', ADD COLUMN IF NOT EXISTS device String DEFAULT '';

-- Hour rollups per (ad, campaign_id, device), beside clicks_by_hour's per ad: recomputed from
-- click_deltas with them and written whole under the same version (an ad's clicks are all in
-- its partition, so the partition's checkpoint orders the writes of every group of the ad). A
-- campaign's or a device's hour is the sum over its ads; days are sums of hours.
CREATE TABLE IF NOT EXISTS click_group_hours
(
    campaign_id String,
    device      String,
    ad_id       String,
    hour        DateTime('UTC'),
    clicks      Int64,
    billable    Int64,
    version     UInt64,
    INDEX device_idx device TYPE bloom_filter GRANULARITY 1
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (campaign_id, hour, device, ad_id)
TTL hour + INTERVAL 730 DAY;
