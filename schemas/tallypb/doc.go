// Package tallypb is the Go code protoc-gen-go generates from schemas/proto/tally.proto, the
// record format of tally's topics (scripts/gen-proto writes it). Tally's own readers and writers
// use the hand-written codec in package schemas, which decodes straight into the event types;
// this package is the schema's descriptor and the reference the codec's tests hold it to, and
// what a Go consumer outside tally can decode records with.
package tallypb
