package schemas

import "fmt"

// Encoding is the format a writer encodes record values in (kafka.record_format).
type Encoding uint8

const (
	// EncodingProtobuf is tally.v1.Record, plain Protobuf: the default.
	EncodingProtobuf Encoding = iota
	// EncodingV1 is version 1, for the length of a rolling upgrade from a release that reads
	// nothing else: readers of this release read both.
	EncodingV1
)

// ParseEncoding reads kafka.record_format: protobuf (also "") or v1.
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "", "protobuf":
		return EncodingProtobuf, nil
	case "v1":
		return EncodingV1, nil
	}
	return 0, fmt.Errorf("record format %q; want protobuf or v1", s)
}

// AppendView appends v's encoding to dst.
func (e Encoding) AppendView(dst []byte, v View) []byte {
	if e == EncodingV1 {
		return appendViewV1(dst, v)
	}
	return AppendView(dst, v)
}

// AppendLike appends l's encoding to dst.
func (e Encoding) AppendLike(dst []byte, l Like) []byte {
	if e == EncodingV1 {
		return appendLikeV1(dst, l)
	}
	return AppendLike(dst, l)
}

// AppendViewCount appends c's encoding to dst.
func (e Encoding) AppendViewCount(dst []byte, c ViewCount) []byte {
	if e == EncodingV1 {
		return appendViewCountV1(dst, c)
	}
	return AppendViewCount(dst, c)
}

// AppendClick appends c's encoding to dst.
func (e Encoding) AppendClick(dst []byte, c Click) []byte {
	if e == EncodingV1 {
		return appendClickV1(dst, c)
	}
	return AppendClick(dst, c)
}

// AppendFraudVerdict appends v's encoding to dst.
func (e Encoding) AppendFraudVerdict(dst []byte, v FraudVerdict) []byte {
	if e == EncodingV1 {
		return appendFraudVerdictV1(dst, v)
	}
	return AppendFraudVerdict(dst, v)
}

// AppendCounted appends c's encoding to dst.
func (e Encoding) AppendCounted(dst []byte, c Counted) []byte {
	if e == EncodingV1 {
		return appendCountedV1(dst, c)
	}
	return AppendCounted(dst, c)
}
