package schemas

import (
	"errors"
	"testing"
)

func TestCounterEventRoundTrip(t *testing.T) {
	e := CounterEvent{Op: CounterClear, Namespace: "shares", Generation: 7, Name: "post-1", Delta: -3, Token: "t-1", TS: 1764800000000, Window: 3_600_000, Retention: 86400}
	got, err := DecodeCounterEvent(AppendCounterEvent(nil, e))
	if err != nil || got != e {
		t.Fatalf("got %+v, %v; want %+v", got, err, e)
	}
	for _, tt := range []struct {
		name, value, field string
	}{
		{"no namespace", `{"name":"a","token":"t","ts":1,"window_ms":1,"retention_s":1}`, "ns"},
		{"no window", `{"ns":"n","name":"a","token":"t","ts":1,"retention_s":1}`, "window_ms"},
		{"no token", `{"ns":"n","name":"a","ts":1,"window_ms":1,"retention_s":1}`, "token"},
		{"bad name", `{"ns":"n","name":"a/b","token":"t","ts":1,"window_ms":1,"retention_s":1}`, "name"},
		{"no time", `{"ns":"n","name":"a","token":"t","window_ms":1,"retention_s":1}`, "ts"},
		{"distinct without a member", `{"op":"distinct","ns":"n","name":"a","ts":1,"window_ms":1,"retention_s":1}`, "member"},
		{"unknown op", `{"op":"reset","ns":"n","name":"a","token":"t","ts":1,"window_ms":1,"retention_s":1}`, "op"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fe *FieldError
			if _, err := DecodeCounterEvent([]byte(tt.value)); !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("got %v; want a refusal naming %s", err, tt.field)
			}
		})
	}
}

// A record from the topic either decodes into an event within bounds or is refused; it never
// panics, and what decodes encodes back to the same event.
func FuzzDecodeCounterEvent(f *testing.F) {
	f.Add([]byte(`{"ns":"shares","gen":1,"name":"p","delta":1,"token":"t","ts":5,"window_ms":60000,"retention_s":3600}`))
	f.Add([]byte(`{"ns":"x","delta":-9223372036854775808}`))
	f.Add([]byte(`{"op":"distinct","ns":"s","name":"p","member":"u@x","ts":5,"window_ms":60000,"retention_s":3600}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeCounterEvent(b)
		if err != nil {
			return
		}
		again, err := DecodeCounterEvent(AppendCounterEvent(nil, e))
		if err != nil || again != e {
			t.Fatalf("got %+v, %v after a round trip; want %+v", again, err, e)
		}
	})
}
