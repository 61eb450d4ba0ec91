package views

import "context"

// Check reports an error, for readiness, while the aggregator's ClickHouse writes (or its loads
// of partition state) keep failing: counting has stopped and views pile up as lag. It names how
// long and why (package writes).
func (a *Aggregator) Check(ctx context.Context) error { return a.writes.Check(ctx) }
