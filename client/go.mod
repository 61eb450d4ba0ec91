module tally/client

go 1.26.8

replace (
	tally/aggregator => ../aggregator
	tally/allinone => ../allinone
	tally/batchjob => ../batchjob
	tally/collector => ../collector
	tally/devstack => ../devstack
	tally/e2e => ../e2e
	tally/likestate => ../likestate
	tally/loadgen => ../loadgen
	tally/platform => ../platform
	tally/schemas => ../schemas
	tally/sink => ../sink
	tally/testsupport => ../testsupport
	tally/topk => ../topk
)

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	go.uber.org/goleak v1.3.0
)
