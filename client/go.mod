module github.com/tallypipeline/tally/client

go 1.26.8

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	go.uber.org/goleak v1.3.0
)
