package schemas

import (
	"testing"
	"time"
)

// BenchmarkParseViewJSON compares a typical NDJSON line through ParseViewJSON (fast path) and
// through encoding/json alone (decodeStd, the fallback).
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
		{"std", func(line []byte, typed bool, now time.Time, bounds TimeBounds) (View, error) {
			var in inputValues
			if err := viewShape.decodeStd(line, &in); err != nil {
				return View{}, err
			}
			return viewOf(&in, typed, now, bounds)
		}},
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

// BenchmarkParseInput is one typical line of every other kind through its parser.
func BenchmarkParseInput(b *testing.B) {
	now := time.UnixMilli(1764460800000)
	view := []byte(`{"type":"view","item_id":"item-123","viewer_id":"viewer-4567890","event_id":"e-1234567890","ts":1764460800000}`)
	click := []byte(`{"type":"click","click_id":"k-1234567890","ad_id":"ad-42","campaign_id":"camp-7","user_hash":"u-abcdef","ip_hash":"h-123456","device":"ios","ts":1764460800000,"fraud_score":0.25}`)
	verdict := []byte(`{"click_id":"k-1234567890","ad_id":"ad-42","verdict":"fraud","reason":"bot farm","decided_at":1764460800000}`)
	parsers := []struct {
		name  string
		parse func() error
	}{
		{"click", func() error { _, err := ParseClickJSON(click, true, now, testBounds); return err }},
		{"event/view", func() error { _, err := ParseEventJSON(view, now, testBounds); return err }},
		{"event/click", func() error { _, err := ParseEventJSON(click, now, testBounds); return err }},
		{"verdict", func() error { _, err := ParseFraudVerdictJSON(verdict, now, testBounds); return err }},
	}
	for _, p := range parsers {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := p.parse(); err != nil {
					b.Fatal(err)
				}
			}
		})
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
