package schemas

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encoding is how a writer encodes record values (kafka.record_format, kafka.schema_id). The
// zero value writes plain Protobuf, the default.
type Encoding struct {
	// V1 writes version 1, for the length of a rolling upgrade from a release that reads
	// nothing else: readers of this release read both.
	V1 bool
	// SchemaID, when not 0, is the id a schema registry gave tally.proto: Protobuf records then
	// carry the Confluent framing (a zero byte, the id, message index 0), as the registry's
	// deserializers expect. Tally's readers read records with and without it.
	SchemaID uint32
}

// ParseEncoding reads kafka.record_format (protobuf, also "", or v1) and kafka.schema_id (0 for
// none; only with protobuf).
func ParseEncoding(format string, schemaID int64) (Encoding, error) {
	if schemaID < 0 || schemaID > math.MaxInt32 {
		return Encoding{}, fmt.Errorf("schema id %d; want 0 (none) to %d", schemaID, math.MaxInt32)
	}
	switch format {
	case "", "protobuf":
		return Encoding{SchemaID: uint32(schemaID)}, nil
	case "v1":
		if schemaID != 0 {
			return Encoding{}, fmt.Errorf("record format v1 has no schema id; got %d", schemaID)
		}
		return Encoding{V1: true}, nil
	}
	return Encoding{}, fmt.Errorf("record format %q; want protobuf or v1", format)
}

// frame appends the registry framing when e has a schema id.
func (e Encoding) frame(dst []byte) []byte {
	if e.SchemaID == 0 {
		return dst
	}
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, e.SchemaID)
	return append(dst, 0) // message index [0]: Record, the file's first message
}

// AppendView appends v's encoding to dst.
func (e Encoding) AppendView(dst []byte, v View) []byte {
	if e.V1 {
		return appendViewV1(dst, v)
	}
	return AppendView(e.frame(dst), v)
}

// AppendLike appends l's encoding to dst.
func (e Encoding) AppendLike(dst []byte, l Like) []byte {
	if e.V1 {
		return appendLikeV1(dst, l)
	}
	return AppendLike(e.frame(dst), l)
}

// AppendViewCount appends c's encoding to dst.
func (e Encoding) AppendViewCount(dst []byte, c ViewCount) []byte {
	if e.V1 {
		return appendViewCountV1(dst, c)
	}
	return AppendViewCount(e.frame(dst), c)
}

// AppendClick appends c's encoding to dst.
func (e Encoding) AppendClick(dst []byte, c Click) []byte {
	if e.V1 {
		return appendClickV1(dst, c)
	}
	return AppendClick(e.frame(dst), c)
}

// AppendFraudVerdict appends v's encoding to dst.
func (e Encoding) AppendFraudVerdict(dst []byte, v FraudVerdict) []byte {
	if e.V1 {
		return appendFraudVerdictV1(dst, v)
	}
	return AppendFraudVerdict(e.frame(dst), v)
}

// AppendCounted appends c's encoding to dst.
func (e Encoding) AppendCounted(dst []byte, c Counted) []byte {
	if e.V1 {
		return appendCountedV1(dst, c)
	}
	return AppendCounted(e.frame(dst), c)
}
