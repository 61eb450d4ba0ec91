// Package likes serves like state: PUT/DELETE /v1/items/{item_id}/likes/{user_id} and
// GET /v1/users/{user_id}/likes, with exact totals, over the Redis state that package likestate
// lays out.
//
// The Kafka topic likes is the source of truth: a change is written there (acks=all) before it
// is applied to Redis, and Redis is only a view of the log that can always be rebuilt from it.
// Every change is applied by likestate's one Lua script, which keeps per (item, user) the log
// offset of the last applied record and ignores older ones: applying the same record twice, or
// two records in any order, ends in the state of the later record in the log.
//
// Concurrency and lifecycle: Handler is safe for concurrent use and owns no goroutines; its
// Kafka producer and likestate.Store belong to the caller. The Applier owns a consumer-group
// client and one goroutine from Start to Stop: it applies every record of the log (repairing a
// crash between a request's log write and its Redis write) and rebuilds the whole serving
// state from the log when Redis lost it, while requests answer 503.
package likes
