// Package client is the Go client of tally's HTTP API, for producers (views, edge servers' view
// counts, events, clicks and their ids, fraud verdicts, likes) and readers (counts, series, click
// series, top-K lists, daily click reports), and of the generic counters (namespaces; add,
// add-and-get, clear and reads, each add's idempotency token fixed before the first attempt).
// It is the one client of the project: the
// all-in-one's demo workload and the load generator use it too.
//
// A Client is safe for concurrent use and owns no goroutines; every call is bounded by its
// context. Calls that may be repeated safely are retried on 503, 429, timeouts and broken
// connections, with exponential backoff jittered by ±50%, waiting at least the server's
// Retry-After. An event's id is fixed before the first attempt (minted when the caller left it
// empty), so a retried request carries the same ids and the pipeline's deduplication makes the
// retry harmless; a view count's identity is the caller's (source, seq), and a verdict's
// decided_at is fixed the same way (the latest decision per click wins, so a repeat is a no-op).
//
// A Batcher collects events into NDJSON bodies bounded in events, bytes and time; it owns one
// goroutine from NewBatcher until Close.
//
// The client is a module of its own, with no dependency on the server's code:
//
//	go get github.com/tallypipeline/tally/client@latest
//
//	import "github.com/tallypipeline/tally/client"
//
//	c, err := client.New(client.Options{BaseURL: "http://localhost:8080", APIKey: key})
//	...
//	err = c.SendView(ctx, client.View{ItemID: "item-1", ViewerID: "viewer-7"})
package client
