module tally/client

go 1.26.8

require github.com/cenkalti/backoff/v5 v5.0.3

require go.uber.org/goleak v1.3.0
