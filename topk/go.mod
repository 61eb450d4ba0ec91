module tally/topk

go 1.26.8

replace (
	tally/platform => ../platform
	tally/schemas => ../schemas
)

require github.com/cespare/xxhash/v2 v2.3.0
