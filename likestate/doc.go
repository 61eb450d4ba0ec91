// Package likestate owns the like state outside the log: its Redis layout and Lua scripts
// (store_redis.go: the serving state the collector answers from, rebuilt from the log), reading
// the likes log up to a snapshot (log_replay.go), following it as a consumer-group member that
// hands batches over and commits them once handled (log_follow.go: the collector's applier and
// the aggregator's loader), and the one row format of the likes table in
// ClickHouse (rows_clickhouse.go). The collector's likes API and applier, the aggregator's loader
// and the nightly likes job import it; none of them knows another's internals. A Store is safe
// for concurrent use; Replay blocks until the log is read; a Follower owns one goroutine from
// Start to Stop, which runs its Handler.
package likestate
