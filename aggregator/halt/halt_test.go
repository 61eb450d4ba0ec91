package halt

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name                       string
		next, counted, start, end  int64
		want                       Reason // "" for no halt
		wantCheckpoint, wantResume int64
	}{
		{"inside the log", 5, 5, 0, 10, "", 0, 0},
		{"at the log's end", 10, 10, 0, 10, "", 0, 0},
		{"at the log's start", 4, 6, 4, 10, "", 0, 0},
		{"nothing counted, old records deleted", 0, 0, 100, 200, "", 0, 0},
		{"beyond the log's end", 10, 10, 0, 3, TailLost, 10, 10},
		{"deltas beyond the end, sketches inside", 2, 10, 0, 3, TailLost, 10, 2},
		{"topic re-created empty", 10, 10, 0, 0, TailLost, 10, 10},
		{"retention past the checkpoint", 5, 5, 8, 20, Retention, 5, 8},
		{"retention past the sketches only", 5, 9, 8, 20, Retention, 5, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Check("views", 3, tt.next, tt.counted, tt.start, tt.end)
			if tt.want == "" {
				if h != nil {
					t.Fatalf("got halt %v; want none", h)
				}
				return
			}
			if h == nil {
				t.Fatalf("got no halt; want %s", tt.want)
			}
			if h.Reason != tt.want || h.Checkpoint != tt.wantCheckpoint || h.ResumeAt() != tt.wantResume {
				t.Errorf("got reason %s, checkpoint %d, resume at %d; want %s, %d, %d", h.Reason, h.Checkpoint, h.ResumeAt(), tt.want, tt.wantCheckpoint, tt.wantResume)
			}
			if msg := h.Error(); !strings.Contains(msg, "aggregator resume --topic views --partition 3 --from "+string(h.Resume())) {
				t.Errorf("got %q; want the resume command in it", msg)
			}
			if _, err := Decide(h, h.Resume(), "", "test", h.At); err != nil {
				t.Errorf("got %v deciding %s; want it taken", err, h.Resume())
			}
			other := FromStart
			if h.Resume() == FromStart {
				other = FromCheckpoint
			}
			if _, err := Decide(h, other, "", "test", h.At); err == nil {
				t.Errorf("got %s taken for %s; want it refused", other, h.Reason)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     Args
		wantRest []string
		wantErr  string
	}{
		{"list", []string{"--config", "c.yaml"}, Args{}, []string{"--config", "c.yaml"}, ""},
		{"decide", []string{"--topic", "views", "--partition=3", "--from", "start", "--note", "ticket 7", "--clickhouse.addr=x:9000"},
			Args{Topic: "views", Partition: 3, Decide: true, From: FromStart, Note: "ticket 7"}, []string{"--clickhouse.addr=x:9000"}, ""},
		{"partial", []string{"--topic", "views"}, Args{}, nil, "together"},
		{"bad partition", []string{"--topic", "views", "--partition", "x", "--from", "start"}, Args{}, nil, "--partition"},
		{"negative partition", []string{"--topic", "views", "--partition", "-1", "--from", "start"}, Args{}, nil, "--partition"},
		{"bad from", []string{"--topic", "views", "--partition", "1", "--from", "end"}, Args{}, nil, "want start or checkpoint"},
		{"missing value", []string{"--topic"}, Args{}, nil, "needs a value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, rest, err := ParseArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || !slices.Equal(rest, tt.wantRest) {
				t.Errorf("got %+v, rest %v, %v; want %+v, rest %v", got, rest, err, tt.want, tt.wantRest)
			}
		})
	}
	if _, _, err := ParseArgs([]string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("got %v for --help; want pflag.ErrHelp", err)
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("--topic views --partition 3 --from start")
	f.Add("--partition=2147483648 --topic= --from checkpoint")
	f.Fuzz(func(t *testing.T, line string) {
		a, _, err := ParseArgs(strings.Fields(line))
		if err != nil || !a.Decide {
			return
		}
		if a.Topic == "" || a.Partition < 0 || (a.From != FromStart && a.From != FromCheckpoint) {
			t.Errorf("got %+v accepted; want a topic, a partition and a resumption", a)
		}
	})
}
