package cli

import (
	"errors"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/tallypipeline/tally/platform/config"
)

// Where Linux states the memory limit of the process's container: cgroup v2 ("max" for none),
// then v1 (a number near 2^63 for none).
const (
	cgroupV2Limit = "/sys/fs/cgroup/memory.max"
	cgroupV1Limit = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	// noLimitAbove is where a v1 limit stops meaning anything.
	noLimitAbove = 1 << 62
)

// containerLimit returns the memory limit the first readable file of files states, in bytes, or
// 0 when it states none (or none can be read).
func containerLimit(files ...string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= noLimitAbove {
			return 0 // "max", or nothing meaningful
		}
		return n
	}
	return 0
}

// TuneMemory paces Go's collector from rt (runtime.gc_percent, runtime.memory_limit) with share
// the part of the container's memory limit that runtime.memory_limit auto gives Go's heap, and
// logs what it set. Run calls it for the servers; a binary that does not go through Run (the
// nightly jobs) calls it itself.
func TuneMemory(rt config.Runtime, share float64, logger *slog.Logger) error {
	t, err := tuneMemory(rt, share, containerLimit(cgroupV2Limit, cgroupV1Limit))
	if err != nil {
		return err
	}
	logger.Info("go memory", "gc_percent", t.GCPercent, "gogc_env", t.GCFromEnv, "limit_mib", t.Limit>>20,
		"gomemlimit_env", t.LimitEnv, "container_limit_mib", t.Container>>20)
	return nil
}

// memoryTuning is what tuneMemory set, for the log.
type memoryTuning struct {
	GCPercent int   // 0 when GOGC set it
	Limit     int64 // bytes; 0 for none
	Container int64 // the container's limit in bytes, 0 for none
	GCFromEnv bool  // GOGC set the percentage
	LimitEnv  bool  // GOMEMLIMIT set the limit
}

// tuneMemory paces Go's collector from the runtime settings, with share the part of the
// container's memory limit that runtime.memory_limit auto gives Go, unless the GOGC and
// GOMEMLIMIT environment variables set the pace (they win, as GOMAXPROCS does). A higher
// gc_percent collects less often for a larger heap; the soft limit makes the collector work harder
// near the memory the process is given instead of letting the kernel kill it.
func tuneMemory(rt config.Runtime, share float64, container int64) (memoryTuning, error) {
	t := memoryTuning{Container: container}
	_, t.LimitEnv = os.LookupEnv("GOMEMLIMIT")
	_, t.GCFromEnv = os.LookupEnv("GOGC")
	if !t.LimitEnv {
		limit, err := rt.GoMemoryLimit(share, container)
		if err != nil {
			return t, err
		}
		t.Limit = limit
	}
	if !t.GCFromEnv {
		if rt.GCPercent == -1 && t.Limit == 0 && !t.LimitEnv {
			return t, errors.New("runtime.gc_percent -1 needs a memory limit, and runtime.memory_limit gives none here (auto without a container limit, or off)")
		}
		t.GCPercent = rt.GCPercent
	}
	if t.Limit > 0 {
		debug.SetMemoryLimit(t.Limit)
	}
	if !t.GCFromEnv {
		debug.SetGCPercent(t.GCPercent)
	}
	return t, nil
}
