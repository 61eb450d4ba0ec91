package collectorconf

import (
	"strings"
	"testing"
)

func FuzzParseAPIKey(f *testing.F) {
	for _, s := range []string{"web:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" + ":ingest+read:100:200", "a:b:c:d:e", "::::", "x:y:z:1e308:9999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseAPIKey(s)
		if err != nil {
			return
		}
		if strings.Count(s, ":") != 4 {
			t.Errorf("ParseAPIKey(%q) = %+v; want an error for %d separators", s, k, strings.Count(s, ":"))
		}
	})
}
