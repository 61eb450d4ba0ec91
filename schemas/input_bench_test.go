package schemas

import (
	"testing"
	"time"
)

// BenchmarkParseViewJSON compares a typical NDJSON line through ParseViewJSON (fast path) and
// through encoding/json alone (parseViewJSONStd, the fallback).
func BenchmarkParseViewJSON(b *testing.B) {
	now := time.UnixMilli(1764460800000)
	lines := []struct{ name, line string }{
		{"ms", `{"type":"view","item_id":"item-123","viewer_id":"viewer-4567890","event_id":"e-1234567890","ts":1764460800000}`},
		{"rfc3339", `{"type":"view","item_id":"item-123","viewer_id":"viewer-4567890","event_id":"e-1234567890","ts":"2025-11-30T00:00:00Z"}`},
	}
	parsers := []struct {
		name  string
		parse func([]byte, bool, time.Time, TimeBounds) (View, error)
	}{
		{"fast", ParseViewJSON},
		{"std", parseViewJSONStd},
	}
	for _, l := range lines {
		for _, p := range parsers {
			b.Run(l.name+"/"+p.name, func(b *testing.B) {
				line := []byte(l.line)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.parse(line, true, now, testBounds); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkParseViewCountJSON is the collector's cost of one edge view count line (encoding/json
// alone: counts are few and large, so they have no fast path), beside one view line's.
func BenchmarkParseViewCountJSON(b *testing.B) {
	now := time.UnixMilli(1764460800000)
	line := []byte(`{"type":"view_count","item_id":"item-123","second":1764460799,"count":120000,"source_id":"edge-eu-3","seq":1234567}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseViewCountJSON(line, true, now, testBounds); err != nil {
			b.Fatal(err)
		}
	}
}
