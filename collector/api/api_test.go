package api

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"tally/schemas"
)

func TestIDs(t *testing.T) {
	hundred := strings.TrimSuffix(strings.Repeat("x,", 99), ",") + ",y"
	tests := []struct {
		name    string
		values  []string
		want    []string
		wantErr string
	}{
		{"one", []string{"a"}, []string{"a"}, ""},
		{"several in order", []string{"b,a,c"}, []string{"b", "a", "c"}, ""},
		{"repeated parameter", []string{"b", "a,c"}, []string{"b", "a", "c"}, ""},
		{"repeats kept", []string{"a,b,a"}, []string{"a", "b", "a"}, ""},
		{"hundred allowed", []string{hundred}, strings.Split(hundred, ","), ""},
		{"absent", nil, nil, "ids: is required"},
		{"empty", []string{""}, nil, "ids: is required"},
		{"empty element", []string{"a,,b"}, nil, "ids: element 2 is required"},
		{"trailing comma", []string{"a,"}, nil, "ids: element 2 is required"},
		{"bad character", []string{"a,b/c"}, nil, "ids: element 2 has character '/'"},
		{"too many", []string{hundred + ",z"}, nil, "ids: has 101 ids; at most 100 allowed"},
		{"too long", []string{strings.Repeat("a", 129)}, nil, "ids: element 1 is 129 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := IDs(tt.values)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q, nil", got, err, tt.want)
			}
		})
	}
}

func FuzzIDs(f *testing.F) {
	for _, s := range []string{"", "a", "a,b", "a,,b", ",", "a,a", "x@y.z:1-2_3", "a\x00b", "é", strings.Repeat("a,", 101)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ids, err := IDs([]string{raw})
		if err != nil {
			var fe *schemas.FieldError
			if !errors.As(err, &fe) || fe.Field != "ids" {
				t.Fatalf("got error %v; want a FieldError naming ids", err)
			}
			return
		}
		if len(ids) == 0 || len(ids) > MaxIDs || strings.Join(ids, ",") != raw {
			t.Fatalf("got %q from %q; want 1..%d ids that join back to the input", ids, raw, MaxIDs)
		}
		for _, id := range ids {
			if err := schemas.CheckID("ids", id, true); err != nil {
				t.Fatalf("accepted invalid id %q: %v", id, err)
			}
		}
	})
}
