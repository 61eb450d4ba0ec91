package schemas

import _ "embed" // the schema file, below

// protoSchema is proto/tally.proto, the schema of the topics' records, built into the binaries
// so that `collector schema` hands it out where no checkout is (a container). Never written.
//
//go:embed proto/tally.proto
var protoSchema string

// ProtoSchema returns schemas/proto/tally.proto.
func ProtoSchema() string { return protoSchema }
