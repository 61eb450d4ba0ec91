package rawlog

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FileRef is what a file's name says.
type FileRef struct {
	Name      string
	Topic     string
	Hour      time.Time // UTC, whole hour
	Partition int32
	First     int64 // offset range of the flush that wrote it, inclusive
	Last      int64
}

// FileName is the name of a topic partition's file of hour for the flush of offsets
// [first, last].
func FileName(topic string, hour time.Time, partition int32, first, last int64) string {
	return fmt.Sprintf("%sp%04d-%020d-%020d.parquet", HourPrefix(topic, hour), partition, first, last)
}

// HourPrefix is the directory of a topic's files of hour.
func HourPrefix(topic string, hour time.Time) string {
	hour = hour.UTC()
	return fmt.Sprintf("%s/%s/%02d/", topic, hour.Format(time.DateOnly), hour.Hour())
}

// DayPrefix is the directory of a topic's files of the UTC day of t.
func DayPrefix(topic string, t time.Time) string {
	return topic + "/" + t.UTC().Format(time.DateOnly) + "/"
}

// MarkerName is where the sink records the flush of a topic partition it is about to write
// (see package archive).
func MarkerName(topic string, partition int32) string {
	return fmt.Sprintf("_flushing/%s/p%04d.json", topic, partition)
}

// HourOf is the UTC hour of an event time in Unix milliseconds.
func HourOf(ts int64) time.Time {
	return time.UnixMilli(ts).UTC().Truncate(time.Hour)
}

// ParseFileName reads a name made by FileName.
func ParseFileName(name string) (FileRef, error) {
	bad := func(why string) (FileRef, error) {
		return FileRef{}, fmt.Errorf("sink file name %q: %s", name, why)
	}
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return bad("want <topic>/<YYYY-MM-DD>/<HH>/p<partition>-<first>-<last>.parquet")
	}
	ref := FileRef{Name: name, Topic: parts[0]}
	if ref.Topic == "" {
		return bad("empty topic")
	}
	d, err := time.Parse(time.DateOnly, parts[1])
	if err != nil || d.Format(time.DateOnly) != parts[1] {
		return bad("bad date")
	}
	h, err := strconv.Atoi(parts[2])
	if err != nil || len(parts[2]) != 2 || !digits(parts[2]) || h > 23 {
		return bad("bad hour")
	}
	ref.Hour = d.Add(time.Duration(h) * time.Hour)
	base, ok := strings.CutSuffix(parts[3], ".parquet")
	if !ok || !strings.HasPrefix(base, "p") {
		return bad("want p<partition>-<first>-<last>.parquet")
	}
	f := strings.Split(base[1:], "-")
	if len(f) != 3 || len(f[0]) != 4 || len(f[1]) != 20 || len(f[2]) != 20 || !digits(f[0]+f[1]+f[2]) {
		return bad("want p<4 digits>-<20 digits>-<20 digits>.parquet")
	}
	p, err1 := strconv.ParseUint(f[0], 10, 16)
	first, err2 := strconv.ParseInt(f[1], 10, 64)
	last, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || first > last {
		return bad("bad partition or offset range")
	}
	ref.Partition, ref.First, ref.Last = int32(p), first, last
	return ref, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
