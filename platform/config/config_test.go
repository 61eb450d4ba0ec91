package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// comp is a component's section as components declare theirs: the loader's tests use it
// instead of a real component, which platform must not import.
type comp struct {
	Addr          string        `mapstructure:"addr"`
	MaxLines      int           `mapstructure:"max_lines"`
	FlushInterval time.Duration `mapstructure:"flush_interval"`
}

func (*comp) Name() string { return "comp" }

func (*comp) Settings() []Setting {
	return []Setting{
		{Key: "comp.addr", Default: "127.0.0.1:8080", Help: "listen address"},
		{Key: "comp.max_lines", Default: 10, Help: "lines"},
		{Key: "comp.flush_interval", Default: time.Second, Help: "flush every"},
	}
}

func (c *comp) Validate(_ *Config, bad Bad) {
	CheckHostPort(bad, "comp.addr", c.Addr)
	Positive(bad, "comp.flush_interval", c.FlushInterval)
}

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("comp:\n  addr: 127.0.0.1:1001\n  max_lines: 7\n  flush_interval: 2s\nkafka:\n  brokers: [a:1, b:2]\nother:\n  anything: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		check func(Config, comp) (got, want any)
	}{
		{"default", nil, nil, func(c Config, k comp) (any, any) { return k.Addr, "127.0.0.1:8080" }},
		{"file beats default", nil, []string{"--config", file}, func(c Config, k comp) (any, any) { return k.MaxLines, 7 }},
		{"file list", nil, []string{"--config", file}, func(c Config, k comp) (any, any) { return strings.Join(c.Kafka.Brokers, ","), "a:1,b:2" }},
		{"file duration", nil, []string{"--config", file}, func(c Config, k comp) (any, any) { return k.FlushInterval, 2 * time.Second }},
		{"env beats file", map[string]string{"TALLY_COMP_ADDR": "127.0.0.1:1002"}, []string{"--config", file}, func(c Config, k comp) (any, any) { return k.Addr, "127.0.0.1:1002" }},
		{"flag beats env", map[string]string{"TALLY_COMP_ADDR": "127.0.0.1:1002"}, []string{"--config", file, "--comp.addr", "127.0.0.1:1003"}, func(c Config, k comp) (any, any) { return k.Addr, "127.0.0.1:1003" }},
		{"env list", map[string]string{"TALLY_KAFKA_BROKERS": "x:1,y:2"}, nil, func(c Config, k comp) (any, any) { return strings.Join(c.Kafka.Brokers, ","), "x:1,y:2" }},
		{"env config file", map[string]string{"TALLY_CONFIG": file}, nil, func(c Config, k comp) (any, any) { return k.MaxLines, 7 }},
		// Another binary's section, and variables of no section, are not this binary's to check.
		{"env of other sections", map[string]string{"TALLY_OTHER_ANYTHING": "1", "TALLY_CACHE_DIR": "/tmp"}, nil, func(c Config, k comp) (any, any) { return k.Addr, "127.0.0.1:8080" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var k comp
			c, err := Load("test", tt.args, &k)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got, want := tt.check(c, k); got != want {
				t.Errorf("got %v; want %v", got, want)
			}
		})
	}
}

func TestLoadErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("comp:\n  adr: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"bad duration flag", nil, []string{"--comp.flush_interval", "soon"}, "comp.flush_interval"},
		{"bad addr", nil, []string{"--comp.addr", "nohostport"}, "comp.addr"},
		{"section check", nil, []string{"--comp.flush_interval", "0s"}, "comp.flush_interval"},
		{"bad env int", map[string]string{"TALLY_KAFKA_PARTITIONS": "many"}, nil, "partitions"},
		{"env typo", map[string]string{"TALLY_KAFKA_COMPRESSON": "zstd", "TALLY_COMP_ADR": "x"}, nil, "unknown environment variable TALLY_COMP_ADR, TALLY_KAFKA_COMPRESSON"},
		{"out of range", nil, []string{"--kafka.partitions", "0"}, "kafka.partitions"},
		{"negative scheduler slots", nil, []string{"--runtime.procs_per_cpu", "-1"}, "runtime.procs_per_cpu"},
		{"zero gc percent", nil, []string{"--runtime.gc_percent", "0"}, "runtime.gc_percent"},
		{"gc only at a limit that is off", nil, []string{"--runtime.gc_percent", "-1", "--runtime.memory_limit", "off"}, "runtime.gc_percent"},
		{"memory limit not a size", nil, []string{"--runtime.memory_limit", "lots"}, `runtime.memory_limit: got "lots"`},
		{"unknown compression", nil, []string{"--kafka.compression", "lz5"}, `kafka.compression: compression "lz5"`},
		{"unknown record format", nil, []string{"--kafka.record_format", "json"}, `kafka.record_format: record format "json"; want protobuf or v1`},
		{"schema id with v1", nil, []string{"--kafka.record_format", "v1", "--kafka.schema_id", "7"}, `kafka.schema_id: record format v1 has no schema id; got 7`},
		{"quorum without replicas", nil, []string{"--clickhouse.addr", "ch:8123", "--clickhouse.quorum"}, "clickhouse.quorum: got true with no clickhouse.cluster"},
		{"unknown file key", nil, []string{"--config", typo}, `"comp.adr"`},
		{"missing file", nil, []string{"--config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"unknown flag", nil, []string{"--nope"}, "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := Load("test", tt.args, &comp{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v; want one naming %s", err, tt.want)
			}
		})
	}
}

// part is a second section under comp's top-level name with keys of its own, as two components
// each declare their part of a shared section.
type part struct {
	Group  string        `mapstructure:"group"`
	Window time.Duration `mapstructure:"window"`
	Auth   struct {
		Token string `mapstructure:"token"`
	} `mapstructure:"auth"`
}

func (*part) Name() string { return "comp" }

func (*part) Settings() []Setting {
	return []Setting{
		{Key: "comp.group", Default: "g", Help: "group"},
		{Key: "comp.window", Default: time.Minute, Help: "window"},
		{Key: "comp.auth.token", Default: "", Help: "token"},
	}
}

func (p *part) Validate(_ *Config, bad Bad) { Positive(bad, "comp.window", p.Window) }

// dup declares a key comp declares too.
type dup struct {
	Addr string `mapstructure:"addr"`
}

func (*dup) Name() string { return "comp" }

func (*dup) Settings() []Setting { return []Setting{{Key: "comp.addr", Default: "", Help: "again"}} }

func (*dup) Validate(*Config, Bad) {}

func TestSectionsSharingAName(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("comp:\n  addr: 127.0.0.1:1001\n  max_lines: 7\n  group: from-file\n  window: 2m\n  auth:\n    token: t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("comp:\n  auth:\n    tokn: t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    string // with the error: a piece of its text; without: the two parts printed
		wantErr bool
	}{
		{"defaults", nil, nil, "127.0.0.1:8080 10 g 1m0s ", false},
		{"file fills both parts", nil, []string{"--config", file}, "127.0.0.1:1001 7 from-file 2m0s t", false},
		{"flag and env reach their part", map[string]string{"TALLY_COMP_WINDOW": "3m"}, []string{"--comp.group", "flag", "--comp.max_lines", "9"}, "127.0.0.1:8080 9 flag 3m0s ", false},
		{"bad value in the second part names its key", nil, []string{"--comp.window", "soon"}, "comp.window", true},
		{"bad value in the first part names its key", map[string]string{"TALLY_COMP_MAX_LINES": "many"}, nil, "comp.max_lines", true},
		{"second part's check", nil, []string{"--comp.window", "0s"}, "comp.window", true},
		{"unknown nested file key", nil, []string{"--config", typo}, `"comp.auth.tokn"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var c comp
			var p part
			_, err := Load("test", tt.args, &c, &p)
			switch {
			case tt.wantErr && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got error %v; want one naming %s", err, tt.want)
			case !tt.wantErr && err != nil:
				t.Fatalf("Load: %v", err)
			case !tt.wantErr:
				if got := fmt.Sprint(c.Addr, " ", c.MaxLines, " ", p.Group, " ", p.Window, " ", p.Auth.Token); got != tt.want {
					t.Errorf("got %q; want %q", got, tt.want)
				}
			}
		})
	}
	if _, err := Load("test", nil, &comp{}, &dup{}); err == nil || !strings.Contains(err.Error(), "comp.addr is declared twice") {
		t.Errorf("got error %v; want one saying comp.addr is declared twice", err)
	}
}

func TestHelpListsEverySetting(t *testing.T) {
	_, err := Load("test", []string{"--help"}, &comp{})
	if !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("got %v; want pflag.ErrHelp", err)
	}
}

func TestGoMemoryLimit(t *testing.T) {
	tests := []struct {
		setting   string
		share     float64
		container int64
		want      int64
		wantErr   bool
	}{
		{"auto", 0.5, 4 << 30, 2 << 30, false},
		{"auto", 0.9, 0, 0, false}, // no container limit: none
		{"off", 0.9, 4 << 30, 0, false},
		{"1.5GiB", 0.9, 0, 3 << 29, false},
		{"800MB", 0.9, 4 << 30, 800_000_000, false},
		{"0", 0.9, 0, 0, true},
		{"-1GiB", 0.9, 0, 0, true},
		{"", 0.9, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.setting, func(t *testing.T) {
			got, err := Runtime{MemoryLimit: tt.setting}.GoMemoryLimit(tt.share, tt.container)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("got %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
