package halt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Usage is the help of `aggregator resume`.
const Usage = `usage: aggregator resume [--topic T --partition N --from start|checkpoint [--note TEXT] [--by NAME]] [config flags]

Without --partition, lists the partitions halted because their checkpoint does not fit their
Kafka log, each with what resuming it loses. With them, records the decision to resume
partition N of topic T; the aggregator that holds the partition resumes it within seconds, and
every later owner that finds the same checkpoint out of the log does the same.

  --from start       for a checkpoint before the log's start (retention deleted records
                     uncounted): count from the log's start; the deleted records stay lost.
  --from checkpoint  for a checkpoint beyond the log's end (the log lost its tail): keep the
                     checkpoint; records the log writes again below it are not counted.

The config flags (or TALLY_* variables, or --config) say which ClickHouse to use.
`

// Args are the command's own arguments.
type Args struct {
	Topic     string
	Partition int32
	Decide    bool // a partition was named: record a decision, not a list
	From      Resume
	Note, By  string
}

// ParseArgs reads the command's own flags from args (after "resume") and returns the rest, the
// config flags, for config.Load.
func ParseArgs(args []string) (Args, []string, error) {
	var a Args
	var rest []string
	var partition, from string
	own := map[string]*string{"--topic": &a.Topic, "--partition": &partition, "--from": &from, "--note": &a.Note, "--by": &a.By}
	for i := 0; i < len(args); i++ {
		name, value, inline := strings.Cut(args[i], "=")
		if name == "-h" || name == "--help" {
			return Args{}, nil, pflag.ErrHelp
		}
		dst, ok := own[name]
		switch {
		case !ok:
			rest = append(rest, args[i])
			continue
		case !inline && i+1 >= len(args):
			return Args{}, nil, fmt.Errorf("%s needs a value", name)
		case !inline:
			i++
			value = args[i]
		}
		*dst = value
	}
	if partition == "" && a.Topic == "" && from == "" {
		return a, rest, nil
	}
	if a.Topic == "" || partition == "" || from == "" {
		return Args{}, nil, errors.New("give --topic, --partition and --from together, or none to list the halted partitions")
	}
	n, err := strconv.ParseInt(partition, 10, 32)
	if err != nil || n < 0 {
		return Args{}, nil, fmt.Errorf("--partition %q: want a partition number", partition)
	}
	a.Partition, a.Decide = int32(n), true
	if a.From, err = ParseResume(from); err != nil {
		return Args{}, nil, err
	}
	return a, rest, nil
}

// Run lists the open halts, or records the decision a asks for, writing what it did to out.
func Run(ctx context.Context, s Store, a Args, now time.Time, out io.Writer) error {
	if !a.Decide {
		return list(ctx, s, out)
	}
	h, ok, err := s.Latest(ctx, a.Topic, a.Partition)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("partition %s/%d has no halt recorded; nothing to resume", a.Topic, a.Partition)
	}
	if d, done, err := s.Decided(ctx, h); err != nil {
		return err
	} else if done {
		fmt.Fprintf(out, "partition %s/%d at checkpoint %d was already decided: resume from %s, by %s at %s\n",
			h.Topic, h.Partition, h.Checkpoint, d.Resume, d.By, d.At.Format(time.RFC3339))
		return nil
	}
	d, err := Decide(h, a.From, a.Note, a.By, now)
	if err != nil {
		return err
	}
	if err := s.Decide(ctx, d); err != nil {
		return err
	}
	fmt.Fprintf(out, "decided: partition %s/%d resumes from %s: %s.\nThe aggregator holding it resumes it within seconds.\n",
		h.Topic, h.Partition, d.Resume, h.Consequence())
	return nil
}

func list(ctx context.Context, s Store, out io.Writer) error {
	hs, err := s.Open(ctx)
	if err != nil {
		return err
	}
	if len(hs) == 0 {
		fmt.Fprintln(out, "no partition is halted")
		return nil
	}
	for _, h := range hs {
		fmt.Fprintf(out, "%s (halted by %s at %s)\n", h.Error(), h.Owner, h.At.Format(time.RFC3339))
	}
	return nil
}
