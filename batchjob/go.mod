module tally/batchjob

go 1.26.8
