package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tallypipeline/tally/schemas"

	"github.com/prometheus/client_golang/prometheus"
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

func TestRouterTimesEachEndpointByStatus(t *testing.T) {
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	r := NewRouter(mux, reg)
	r.Handle("GET /ok", "ok", func(w http.ResponseWriter, _ *http.Request) int { return JSON(w, http.StatusOK, "x") })
	r.Handle("GET /down", "down", func(w http.ResponseWriter, _ *http.Request) int { return Unavailable(w, "no") })
	for _, path := range []string{"/ok", "/ok", "/down"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	tests := []struct {
		endpoint, code string
		want           uint64
	}{
		{"ok", "200", 2},
		{"down", "503", 1},
		{"ok", "503", 0},
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.endpoint+"/"+tt.code, func(t *testing.T) {
			var got uint64
			for _, f := range families {
				for _, m := range f.GetMetric() {
					labels := map[string]string{}
					for _, l := range m.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					if f.GetName() == "tally_http_request_seconds" && labels["endpoint"] == tt.endpoint && labels["code"] == tt.code {
						got = m.GetHistogram().GetSampleCount()
					}
				}
			}
			if got != tt.want {
				t.Errorf("got %d observations; want %d", got, tt.want)
			}
		})
	}
}

func TestLatencyBuckets(t *testing.T) {
	b := LatencyBuckets()
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			t.Fatalf("bound %d: got %g after %g; want increasing bounds", i, b[i], b[i-1])
		}
	}
	tests := []struct {
		name  string
		bound float64
	}{
		{"the reads' aim", 0.005},
		{"the reads' bar", 0.02},
		{"the smallest", 0.00025},
		{"the largest", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !slices.Contains(b, tt.bound) {
				t.Errorf("got bounds %v; want %g among them", b, tt.bound)
			}
		})
	}
}
