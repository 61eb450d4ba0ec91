package counters

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name, ns, body string
		want           Namespace
		field          string // the field a refusal names; empty when valid
	}{
		{"defaults", "shares", `{"mode":"best_effort"}`,
			Namespace{Name: "shares", Mode: ModeBestEffort, Retention: DefaultRetention, IdempotencyWindow: DefaultIdempotency}, ""},
		{"everything", "plays.eu-1", `{"mode":"best_effort","retention":"30d","idempotency_window":"90m","writers":["svc-a"],"readers":["svc-a","svc-b"]}`,
			Namespace{Name: "plays.eu-1", Mode: ModeBestEffort, Retention: 30 * 24 * time.Hour, IdempotencyWindow: 90 * time.Minute,
				Writers: []string{"svc-a"}, Readers: []string{"svc-a", "svc-b"}}, ""},
		{"name upper case", "Shares", `{"mode":"best_effort"}`, Namespace{}, "ns"},
		{"name too long", strings.Repeat("a", 64), `{"mode":"best_effort"}`, Namespace{}, "ns"},
		{"name with a slash", "a/b", `{"mode":"best_effort"}`, Namespace{}, "ns"},
		{"no mode", "shares", `{}`, Namespace{}, "mode"},
		{"unknown mode", "shares", `{"mode":"exact"}`, Namespace{}, "mode"},
		{"eventual", "shares", `{"mode":"eventual"}`,
			Namespace{Name: "shares", Mode: ModeEventual, Retention: DefaultRetention, IdempotencyWindow: DefaultIdempotency}, ""},
		{"accurate", "shares", `{"mode":"accurate","idempotency_window":"2h"}`,
			Namespace{Name: "shares", Mode: ModeAccurate, Retention: DefaultRetention, IdempotencyWindow: 2 * time.Hour}, ""},
		{"retention too short", "shares", `{"mode":"best_effort","retention":"59m"}`, Namespace{}, "retention"},
		{"retention not a duration", "shares", `{"mode":"best_effort","retention":"a week"}`, Namespace{}, "retention"},
		{"window too long", "shares", `{"mode":"best_effort","idempotency_window":"8d"}`, Namespace{}, "idempotency_window"},
		{"fractional days", "shares", `{"mode":"best_effort","idempotency_window":"1.5d"}`, Namespace{}, "idempotency_window"},
		{"bad writer id", "shares", `{"mode":"best_effort","writers":["a b"]}`, Namespace{}, "writers"},
		{"unknown field", "shares", `{"mode":"best_effort","ttl":"1d"}`, Namespace{}, "body"},
		{"not json", "shares", `mode=best_effort`, Namespace{}, "body"},
		{"two values", "shares", `{"mode":"best_effort"} {"mode":"eventual"}`, Namespace{}, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSpec(tt.ns, []byte(tt.body))
			if tt.field != "" {
				var fe *schemas.FieldError
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Fatalf("got %v; want a refusal naming %s", err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.want.Name || got.Mode != tt.want.Mode || got.Retention != tt.want.Retention || got.IdempotencyWindow != tt.want.IdempotencyWindow ||
				!slices.Equal(got.Writers, tt.want.Writers) || !slices.Equal(got.Readers, tt.want.Readers) {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestDurations(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		back string
	}{{"90d", 90 * 24 * time.Hour, "90d"}, {"24h", 24 * time.Hour, "1d"}, {"90m", 90 * time.Minute, "1h30m0s"}, {"1d", 24 * time.Hour, "1d"}} {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q): got %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if s := FormatDuration(got); s != tt.back {
			t.Errorf("FormatDuration(%v): got %q; want %q", got, s, tt.back)
		}
	}
}

func TestAccessLists(t *testing.T) {
	open := Namespace{}
	listed := Namespace{Writers: []string{"w"}, Readers: []string{"r", "w"}}
	for _, tt := range []struct {
		ns          Namespace
		key         string
		write, read bool
	}{{open, "any", true, true}, {listed, "w", true, true}, {listed, "r", false, true}, {listed, "x", false, false}} {
		if got := tt.ns.MayWrite(tt.key); got != tt.write {
			t.Errorf("%+v MayWrite(%q): got %v; want %v", tt.ns, tt.key, got, tt.write)
		}
		if got := tt.ns.MayRead(tt.key); got != tt.read {
			t.Errorf("%+v MayRead(%q): got %v; want %v", tt.ns, tt.key, got, tt.read)
		}
	}
}

// A namespace body from outside either parses into settings within their limits or is refused
// naming a field; it never panics.
func FuzzParseSpec(f *testing.F) {
	f.Add("shares", []byte(`{"mode":"best_effort","retention":"30d","idempotency_window":"90m","writers":["a"]}`))
	f.Add("x", []byte(`{"mode":"eventual"}`))
	f.Add("y", []byte(`{"mode":"best_effort","retention":"99999999999d"}`))
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		ns, err := ParseSpec(name, body)
		if err != nil {
			var fe *schemas.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v; want a *schemas.FieldError", err)
			}
			return
		}
		if ns.Retention < MinRetention || ns.Retention > MaxRetention || ns.IdempotencyWindow < MinIdempotency || ns.IdempotencyWindow > MaxIdempotency {
			t.Fatalf("got %+v; want settings within their limits", ns)
		}
		if CheckName(ns.Name) != nil || ns.Mode != ModeBestEffort && !ns.Mode.Logged() {
			t.Fatalf("got %+v; want a valid name and mode", ns)
		}
	})
}

// A refresh whose read of the store began before a change made here keeps the change: a
// namespace created or deleted while the store was read is not undone by the older read.
func TestRefreshKeepsChangesMadeDuringTheRead(t *testing.T) {
	ns := func(name string, version uint64) Namespace {
		return Namespace{Name: name, Version: version, Generation: version}
	}
	tests := []struct {
		name    string
		held    map[string]Namespace // after the local changes
		deleted map[string]uint64
		read    map[string]Namespace // what the store gave, read from version 10 on
		want    []string
	}{
		{"created during the read", map[string]Namespace{"a": ns("a", 5), "new": ns("new", 11)}, nil,
			map[string]Namespace{"a": ns("a", 5)}, []string{"a", "new"}},
		{"deleted during the read", map[string]Namespace{}, map[string]uint64{"a": 12},
			map[string]Namespace{"a": ns("a", 5)}, nil},
		{"created elsewhere", map[string]Namespace{"a": ns("a", 5)}, nil,
			map[string]Namespace{"a": ns("a", 5), "b": ns("b", 9)}, []string{"a", "b"}},
		{"deleted elsewhere before the read", map[string]Namespace{"a": ns("a", 5)}, nil,
			map[string]Namespace{}, nil},
		{"changed here, then newer elsewhere", map[string]Namespace{"a": ns("a", 11)}, nil,
			map[string]Namespace{"a": ns("a", 13)}, []string{"a"}},
		{"deleted here long before, created again elsewhere", map[string]Namespace{}, map[string]uint64{"a": 8},
			map[string]Namespace{"a": ns("a", 9)}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry(Store{}, time.Now, nil)
			r.byName = tt.held
			for k, v := range tt.deleted {
				r.deleted[k] = v
			}
			r.install(tt.read, 10)
			got := slices.Sorted(maps.Keys(r.byName))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got namespaces %v; want %v", got, tt.want)
			}
			if a, ok := r.byName["a"]; tt.name == "changed here, then newer elsewhere" && (!ok || a.Version != 13) {
				t.Errorf("got a at version %d; want the store's newer 13", a.Version)
			}
		})
	}
}
