package rawlog

import (
	"testing"
	"time"
)

func TestFileNameRoundTrip(t *testing.T) {
	hour := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		topic       string
		partition   int32
		first, last int64
		want        string
	}{
		{"first flush", "views", 0, 0, 99, "views/2026-12-01/07/p0000-00000000000000000000-00000000000000000099.parquet"},
		{"big offsets", "likes", 1023, 1 << 40, 1<<40 + 5, "likes/2026-12-01/07/p1023-00000001099511627776-00000001099511627781.parquet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FileName(tc.topic, hour, tc.partition, tc.first, tc.last)
			if got != tc.want {
				t.Fatalf("FileName: got %q; want %q", got, tc.want)
			}
			ref, err := ParseFileName(got)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Topic != tc.topic || !ref.Hour.Equal(hour) || ref.Partition != tc.partition || ref.First != tc.first || ref.Last != tc.last {
				t.Fatalf("ParseFileName: got %+v; want topic %s hour %s partition %d range %d-%d", ref, tc.topic, hour, tc.partition, tc.first, tc.last)
			}
		})
	}
}

func TestParseFileNameRefuses(t *testing.T) {
	for _, name := range []string{
		"",
		"views/2026-12-01/07/p0000-00000000000000000000-00000000000000000099.parquet.tmp",
		"views/2026-12-01/24/p0000-00000000000000000000-00000000000000000099.parquet",
		"views/2026-13-01/07/p0000-00000000000000000000-00000000000000000099.parquet",
		"views/2026-12-01/07/p0000-00000000000000000100-00000000000000000099.parquet",
		"views/2026-12-01/07/p000-00000000000000000000-00000000000000000099.parquet",
		"views/2026-12-01/+7/p0000-00000000000000000000-00000000000000000099.parquet",
		"views/2026-12-01/07/p0000-+0000000000000000000-00000000000000000099.parquet",
		"_flushing/views/p0000.json",
	} {
		t.Run(name, func(t *testing.T) {
			if ref, err := ParseFileName(name); err == nil {
				t.Fatalf("got %+v; want an error", ref)
			}
		})
	}
}

// FuzzParseFileName: names come from listing a store anyone with access can write to. Whatever
// parses must be exactly the name FileName makes of it.
func FuzzParseFileName(f *testing.F) {
	f.Add("views/2026-12-01/07/p0000-00000000000000000000-00000000000000000099.parquet")
	f.Add("likes/2000-01-01/00/p1023-00000001099511627776-00000001099511627781.parquet")
	f.Add("views/2026-12-01/07/p0000-0-1.parquet")
	f.Add("a/b/c/d")
	f.Fuzz(func(t *testing.T, name string) {
		ref, err := ParseFileName(name)
		if err != nil {
			return
		}
		if got := FileName(ref.Topic, ref.Hour, ref.Partition, ref.First, ref.Last); got != name {
			t.Fatalf("ParseFileName(%q) = %+v, which FileName makes %q", name, ref, got)
		}
	})
}
