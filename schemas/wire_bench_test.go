package schemas

import "testing"

// BenchmarkDecodeView is the aggregator's decode (and validation) of one record value.
func BenchmarkDecodeView(b *testing.B) {
	rec := AppendView(nil, View{ItemID: "load-i00123", ViewerID: "v04567890", EventID: "e-1234567890", TS: 1764460800000})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeView(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendView is the collector's encoding of one view into a reused buffer.
func BenchmarkAppendView(b *testing.B) {
	v := View{ItemID: "load-i00123", ViewerID: "v04567890", EventID: "e-1234567890", TS: 1764460800000}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendView(buf[:0], v)
	}
}
