package loadgen

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseArgsDefaults(t *testing.T) {
	c, err := ParseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"url", c.URL, "http://127.0.0.1:8080"},
		{"scenario", c.Scenarios, Scenarios{Views: true}},
		{"duration", c.Duration, 60 * time.Second},
		{"rate", c.Rate, 100000},
		{"batch", c.Batch, 1000},
		{"hot-share", c.HotShare, 0.5},
		{"read-rate", c.ReadRate, 1000},
		{"catalog", c.Catalog, 10000},
		{"like-rate", c.LikeRate, 5000},
		{"brokers", strings.Join(c.Brokers, ","), "127.0.0.1:9092"},
		{"group", c.Group, "tally-aggregator"},
		{"json", c.JSON, ""},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if ck.got != ck.want {
				t.Errorf("got %v; want %v", ck.got, ck.want)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(Config) (got, want any)
		wantErr string // substring; "" means no error
	}{
		{"views+reads", []string{"--scenario", "views+reads"}, func(c Config) (any, any) { return c.Scenarios, Scenarios{Views: true, Reads: true} }, ""},
		{"all three", []string{"--scenario=likes+views+reads"}, func(c Config) (any, any) { return c.Scenarios.String(), "views+reads+likes" }, ""},
		{"bare --json means stdout", []string{"--json"}, func(c Config) (any, any) { return c.JSON, "-" }, ""},
		{"--json=FILE", []string{"--json=/tmp/r.json"}, func(c Config) (any, any) { return c.JSON, "/tmp/r.json" }, ""},
		{"localhost url", []string{"--url", "http://localhost:9"}, func(c Config) (any, any) { return c.URL, "http://localhost:9" }, ""},
		{"ipv6 loopback url", []string{"--url", "http://[::1]:8080"}, func(c Config) (any, any) { return c.URL, "http://[::1]:8080" }, ""},
		{"likes alone ignores bad view settings", []string{"--scenario", "likes", "--batch", "0"}, func(c Config) (any, any) { return c.Batch, 0 }, ""},
		{"unknown scenario", []string{"--scenario", "views+writes"}, nil, `--scenario has "writes"`},
		{"view counts", []string{"--scenario", "view-counts", "--count-views", "5000"}, func(c Config) (any, any) {
			return fmt.Sprint(c.Scenarios, c.CountViews, c.CountRate), "view-counts 5000 1000"
		}, ""},
		{"view counts of zero views", []string{"--scenario", "view-counts", "--count-views", "0"}, nil, "--count-views: got 0"},
		{"empty scenario", []string{"--scenario", ""}, nil, "--scenario is empty"},
		{"remote url refused", []string{"--url", "http://10.0.0.5:8080"}, nil, "--url: host \"10.0.0.5\" is not a loopback address"},
		{"named host refused", []string{"--url", "http://example.com"}, nil, "is not a loopback address"},
		{"ftp refused", []string{"--url", "ftp://127.0.0.1:8080"}, nil, "want http://host:port or https://host:port"},
		{"remote broker refused", []string{"--brokers", "192.168.1.2:9092"}, nil, "--brokers: host \"192.168.1.2\""},
		{"remote deployment with --remote", []string{"--remote", "--url", "https://tally.example.com", "--brokers", "kafka.example.com:9093"},
			func(c Config) (any, any) {
				return fmt.Sprint(c.URL, c.Brokers, c.Remote), "https://tally.example.com[kafka.example.com:9093] true"
			}, ""},
		{"broker without port", []string{"--brokers", "127.0.0.1"}, nil, "want host:port"},
		{"duration bounded", []string{"--duration", "2h"}, nil, "--duration: got 2h0m0s"},
		{"zero duration", []string{"--duration", "0s"}, nil, "--duration"},
		{"hot share over 1", []string{"--hot-share", "1.5"}, nil, "--hot-share: got 1.5"},
		{"batch over collector max", []string{"--batch", "20000"}, nil, "--batch: got 20000; want 1..10000"},
		{"catalog of a million", []string{"--scenario", "reads", "--catalog", "1000000"}, func(c Config) (any, any) { return c.Catalog, 1_000_000 }, ""},
		{"catalog zero", []string{"--scenario", "reads", "--catalog", "0"}, nil, "--catalog: got 0; want 1..10000000"},
		{"catalog not a number", []string{"--scenario", "reads", "--catalog", "1e6"}, nil, "--catalog"},
		{"read ids over 100", []string{"--scenario", "reads", "--read-ids", "101"}, nil, "--read-ids: got 101"},
		{"like rate zero", []string{"--scenario", "likes", "--like-rate", "0"}, nil, "--like-rate: got 0"},
		{"counter reads alone need no broker", []string{"--scenario", "counters", "--counter-rate", "0", "--counter-read-rate", "10", "--brokers", ""},
			func(c Config) (any, any) { return fmt.Sprint(c.CounterRate, c.CounterReadRate), "0 10" }, ""},
		{"counter adds sample the lag", []string{"--scenario", "counters", "--brokers", ""}, nil, "--brokers: is empty"},
		{"counters with neither adds nor reads", []string{"--scenario", "counters", "--counter-rate", "0"}, nil, "--counter-rate: got 0 with --counter-read-rate 0"},
		{"bad run id", []string{"--run-id", "a/b"}, nil, "--run-id"},
		{"stray argument", []string{"views"}, nil, `unexpected argument "views"`},
		{"unknown flag", []string{"--rps", "5"}, nil, "unknown flag: --rps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseArgs(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v; want none", err)
			}
			if got, want := tt.check(c); got != want {
				t.Errorf("got %v; want %v", got, want)
			}
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	var out strings.Builder
	_, err := ParseArgs([]string{"--help"}, &out)
	if !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("got %v; want pflag.ErrHelp", err)
	}
	for _, flag := range []string{"--scenario", "--rate", "--duration", "--batch", "--concurrency", "--hot-share", "--items", "--brokers", "--read-rate", "--catalog", "--like-rate", "--json"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("help: got no %s; want every flag listed", flag)
		}
	}
}

func TestMainExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"help", []string{"--help"}, 0},
		{"bad flag", []string{"--duration", "-1s"}, 2},
		{"nobody listening", []string{"--url", "http://127.0.0.1:1", "--duration", "1s"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Main(tt.args, io.Discard, io.Discard); got != tt.want {
				t.Errorf("got exit %d; want %d", got, tt.want)
			}
		})
	}
}

// The API key and the lag monitor's Kafka security come from the environment tally's binaries
// read, never from flags.
func TestParseArgsFromTheEnvironment(t *testing.T) {
	t.Setenv("TALLY_LOAD_API_KEY", "k-123")
	t.Setenv("TALLY_KAFKA_SASL_MECHANISM", "PLAIN")
	t.Setenv("TALLY_KAFKA_SASL_USERNAME", "u")
	t.Setenv("TALLY_KAFKA_SASL_PASSWORD", "p")
	t.Setenv("TALLY_KAFKA_TLS_ENABLED", "true")
	t.Setenv("TALLY_KAFKA_TLS_CA_FILE", "/etc/ca.pem")
	c, err := ParseArgs([]string{"--scenario", "reads"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(c.APIKey, " ", c.KafkaSASL.SASLMechanism, c.KafkaSASL.Username, c.KafkaSASL.Password, " ", c.KafkaSASL.TLS.Enabled, c.KafkaSASL.TLS.CAFile)
	if want := "k-123 PLAINup true/etc/ca.pem"; got != want {
		t.Errorf("got %q; want %q", got, want)
	}
}
