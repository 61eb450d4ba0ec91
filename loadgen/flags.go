package loadgen

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/platform/buildinfo"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/tlsconf"
)

// Config is one load run.
type Config struct {
	URL     string   // collector base URL, loopback unless Remote
	Brokers []string // Kafka seeds for the consumer-lag monitor, loopback unless Remote
	// Remote allows a URL and brokers off this machine: a deployment its operator measures.
	Remote bool
	// APIKey is sent as X-API-Key (a collector with access control on): TALLY_LOAD_API_KEY from
	// the environment, never a flag, which ps would show.
	APIKey string
	// KafkaSASL is how the lag monitor authenticates and protects its link: the TALLY_KAFKA_SASL_*
	// and TALLY_KAFKA_TLS_* variables of the environment, as the embedded stack's infra.env sets
	// them and as every tally binary reads them.
	KafkaSASL kafka.Security
	Group     string // consumer group whose lag is watched
	Scenarios Scenarios
	Duration  time.Duration
	RunID     string // prefixes every item and user id, so runs against one collector do not mix
	Timeout   time.Duration
	JSON      string // "" no JSON; "-" JSON on stdout (text goes to stderr); else a file
	Progress  time.Duration
	// ProgressForced prints progress lines even when stderr is not a terminal.
	ProgressForced bool

	// views
	Rate        int
	Batch       int
	Concurrency int
	HotShare    float64
	Items       int
	Viewers     int
	Warmup      time.Duration
	LagWindow   time.Duration
	Drain       time.Duration
	ProbeEvery  time.Duration
	ProbePoll   time.Duration
	ProbeWait   time.Duration

	// clicks
	ClickRate        int
	ClickBatch       int
	ClickConcurrency int
	ClickGroup       string

	// view counts
	CountRate  int // records per second
	CountBatch int
	CountViews int // views each record carries

	// reads
	ReadRate int
	ReadIDs  int
	Catalog  int

	// likes
	LikeRate    int
	Users       int
	LikedByRate int
	LikedByIDs  int

	// counters
	CounterMode        string
	CounterRate        int
	CounterBatch       int
	CounterConcurrency int
	CounterHotShare    float64
	CounterNames       int
	CounterReadRate    int
	CounterReadNames   int

	MaxInflight int // workers per open-loop stream
}

// Scenarios says which workloads run at once.
type Scenarios struct {
	Views, Clicks, ViewCounts, Reads, Likes, Counters bool
}

func (s Scenarios) String() string {
	var parts []string
	for _, p := range []struct {
		on   bool
		name string
	}{{s.Views, "views"}, {s.Clicks, "clicks"}, {s.ViewCounts, "view-counts"}, {s.Reads, "reads"}, {s.Likes, "likes"}, {s.Counters, "counters"}} {
		if p.on {
			parts = append(parts, p.name)
		}
	}
	return strings.Join(parts, "+")
}

// ParseScenarios reads a '+'-joined set of views, clicks, view-counts, reads, likes and counters
// (e.g. "views+reads").
func ParseScenarios(s string) (Scenarios, error) {
	var sc Scenarios
	if s == "" {
		return sc, errors.New("is empty; want views, clicks, view-counts, reads, likes, counters or a '+'-joined set such as views+clicks")
	}
	for _, p := range strings.Split(s, "+") {
		switch p {
		case "views":
			sc.Views = true
		case "clicks":
			sc.Clicks = true
		case "view-counts":
			sc.ViewCounts = true
		case "reads":
			sc.Reads = true
		case "likes":
			sc.Likes = true
		case "counters":
			sc.Counters = true
		default:
			return sc, fmt.Errorf("has %q; want views, clicks, view-counts, reads, likes, counters or a '+'-joined set such as views+clicks", p)
		}
	}
	return sc, nil
}

// Bounds that keep one run finite and on this machine's scale.
const (
	maxDuration    = 30 * time.Minute
	maxRate        = 2_000_000
	maxConcurrency = 1024
)

// ParseArgs reads the load command's flags. usage receives --help's text; after --help it
// returns pflag.ErrHelp.
func ParseArgs(args []string, usage io.Writer) (Config, error) {
	var c Config
	var scenario string
	fs := pflag.NewFlagSet("load", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(usage)
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:8080", "collector base URL, http or https (loopback unless --remote); its API key, if it needs one, from TALLY_LOAD_API_KEY")
	fs.StringSliceVar(&c.Brokers, "brokers", []string{"127.0.0.1:9092"}, "Kafka seed brokers for the consumer-lag monitor (loopback unless --remote); it authenticates with TALLY_KAFKA_SASL_MECHANISM, _USERNAME, _PASSWORD and _TOKEN_FILE and connects over TLS with TALLY_KAFKA_TLS_ENABLED=true and _CA_FILE from the environment when set (the embedded stack's: set -a; . <data_dir>/infra.env; set +a)")
	fs.BoolVar(&c.Remote, "remote", false, "allow --url and --brokers off this machine: a deployment of yours to measure (the load is real)")
	c.APIKey = os.Getenv("TALLY_LOAD_API_KEY")
	c.KafkaSASL = kafkaFromEnv(os.Getenv)
	fs.StringVar(&c.Group, "group", "tally-aggregator", "consumer group whose lag on topic views is sampled every second")
	fs.StringVar(&scenario, "scenario", "views", "workloads to run at once: views, clicks, view-counts, reads, likes, counters, or a '+'-joined set (views+clicks)")
	fs.DurationVar(&c.Duration, "duration", 60*time.Second, "how long the load runs (at most 30m)")
	fs.StringVar(&c.RunID, "run-id", "", "prefix of every item and user id (default: load-<random>), so runs do not mix")
	fs.DurationVar(&c.Timeout, "timeout", 15*time.Second, "per-request timeout")
	fs.StringVar(&c.JSON, "json", "", "also write the report as JSON: --json for stdout (the text then goes to stderr), --json=FILE for a file")
	fs.Lookup("json").NoOptDefVal = "-"
	fs.DurationVar(&c.Progress, "progress", 2*time.Second, "interval of progress lines on stderr, printed only when stderr is a terminal unless this flag is given (0: none)")

	fs.IntVar(&c.Rate, "rate", 100000, "views: target view events per second")
	fs.IntVar(&c.Batch, "batch", 1000, "views: NDJSON lines per POST /v1/events")
	fs.IntVar(&c.Concurrency, "concurrency", 8, "views: concurrent posters (each waits for its 202 before the next batch)")
	fs.Float64Var(&c.HotShare, "hot-share", 0.5, "views: share of events on the one hot item (0..1)")
	fs.IntVar(&c.Items, "items", 10000, "views, reads: items besides the hot one")
	fs.IntVar(&c.Viewers, "viewers", 10_000_000, "views: distinct viewer ids drawn at random")
	fs.DurationVar(&c.Warmup, "warmup", 10*time.Second, "lag samples before this are not compared; open-loop latency and visibility are also reported for requests due and probes posted after it (at most a third of --duration)")
	fs.DurationVar(&c.LagWindow, "lag-window", 10*time.Second, "views: lag growth compares the median of the first and the last window after warm-up")
	fs.DurationVar(&c.Drain, "drain", 30*time.Second, "views: after the load, wait up to this long for the lag to reach zero (0: do not wait)")
	fs.DurationVar(&c.ProbeEvery, "probe-every", 500*time.Millisecond, "views: post one marker view for a new probe item this often")
	fs.DurationVar(&c.ProbePoll, "probe-poll", 100*time.Millisecond, "views: poll GET /v1/items/{probe}/counts this often until it shows the view")
	fs.DurationVar(&c.ProbeWait, "probe-timeout", 30*time.Second, "views: a probe not visible after this long counts as not visible")

	fs.IntVar(&c.ReadRate, "read-rate", 1000, "reads: GET /v1/counts requests per second, open loop")
	fs.IntVar(&c.ReadIDs, "read-ids", 20, "reads: item ids per GET /v1/counts (1..100): a feed page, the hot item and ids drawn from the catalog")
	fs.IntVar(&c.ClickRate, "click-rate", 50000, "clicks: target clicks per second (NDJSON to POST /v1/events; --hot-share of them on one ad, the rest over --items ads)")
	fs.IntVar(&c.ClickBatch, "click-batch", 1000, "clicks: NDJSON lines per POST /v1/events")
	fs.IntVar(&c.ClickConcurrency, "click-concurrency", 8, "clicks: concurrent posters")
	fs.StringVar(&c.ClickGroup, "click-group", "tally-aggregator-clicks", "clicks: consumer group whose lag on topic clicks is sampled every second")
	fs.IntVar(&c.CountRate, "count-rate", 1000, "view-counts: edge view count records per second (view_count lines to POST /v1/events from --concurrency posters; --hot-share of them on the hot item, the rest over --items items; a random source and seq each)")
	fs.IntVar(&c.CountBatch, "count-batch", 100, "view-counts: NDJSON lines per POST /v1/events")
	fs.IntVar(&c.CountViews, "count-views", 1000, "view-counts: views each record carries")
	fs.IntVar(&c.Catalog, "catalog", 10000, "reads: items a feed page draws its ids from, uniformly (items 1..N; the views scenario posts to items 1..--items, so set both alike for views over the whole catalog)")

	fs.IntVar(&c.LikeRate, "like-rate", 5000, "likes: PUT/DELETE requests per second on the hot item, open loop")
	fs.IntVar(&c.Users, "users", 100000, "likes: distinct users liking and unliking")
	fs.IntVar(&c.LikedByRate, "liked-by-rate", 1000, "likes: GET /v1/users/{id}/likes requests per second, open loop (0: none)")
	fs.IntVar(&c.LikedByIDs, "liked-by-ids", 20, "likes: item ids per GET /v1/users/{id}/likes (1..100)")

	fs.StringVar(&c.CounterMode, "counter-mode", "eventual", "counters: the mode of the run's namespace (named by the run id): best_effort, eventual or accurate")
	fs.IntVar(&c.CounterRate, "counter-rate", 50000, "counters: target adds per second (batches to POST /v1/namespaces/{ns}/adds, each add with its own token); 0: reads alone (--counter-read-rate), no consumer lag sampled, e.g. against a do-nothing floor server")
	fs.IntVar(&c.CounterBatch, "counter-batch", 500, "counters: adds per request (1..1000)")
	fs.IntVar(&c.CounterConcurrency, "counter-concurrency", 4, "counters: concurrent posters")
	fs.Float64Var(&c.CounterHotShare, "counter-hot-share", 1, "counters: share of adds to the one hot counter (0..1), the rest over --counter-names counters")
	fs.IntVar(&c.CounterNames, "counter-names", 100000, "counters: counters besides the hot one")
	fs.IntVar(&c.CounterReadRate, "counter-read-rate", 0, "counters: GET /v1/namespaces/{ns}/counters requests per second, open loop (0: none)")
	fs.IntVar(&c.CounterReadNames, "counter-read-names", 100, "counters: names per read (1..100), drawn from the run's counters")

	fs.IntVar(&c.MaxInflight, "max-inflight", 256, "open-loop streams: most requests in flight per stream; beyond it requests start late and the lateness counts as latency")
	version := fs.Bool("version", false, "print the build (version, VCS revision, Go version) and exit")
	fs.Usage = func() {
		fmt.Fprint(usage, `Usage: load [flags]

Drives an already-running collector over HTTP (loopback unless --remote) for --duration, then prints
throughput and latency percentiles (p50/p90/p99/max). Open-loop streams (reads, likes) fire on
schedule and measure latency from the scheduled time, so a slow server is not hidden.
Exit status: 0 the run completed without errors, 1 it could not run or saw errors, 2 bad flags.

`)
		fmt.Fprint(usage, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *version {
		fmt.Fprintln(usage, "load", buildinfo.Read())
		return c, pflag.ErrHelp // answered: a clean exit, like --help
	}
	c.ProgressForced = fs.Changed("progress")
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.Scenarios, err = ParseScenarios(scenario); err != nil {
		return c, fmt.Errorf("--scenario %w", err)
	}
	return c, c.validate()
}

// validate bounds every setting so a run stays finite and on this machine.
func (c Config) validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	positive := func(flag string, d time.Duration) {
		if d <= 0 {
			bad(flag, "got %s; want a positive duration", d)
		}
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		bad("url", "%v", err)
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		bad("url", "got %q; want http://host:port or https://host:port", c.URL)
	case !c.Remote && !loopback(u.Hostname()):
		bad("url", "host %q is not a loopback address; load is only sent to this machine unless --remote", u.Hostname())
	}
	if c.Scenarios.Views || c.Scenarios.Clicks || c.Scenarios.ViewCounts || c.Scenarios.Counters && c.CounterRate > 0 {
		if len(c.Brokers) == 0 {
			bad("brokers", "is empty; the views, clicks, view-counts and counters (with adds) scenarios sample consumer lag")
		}
		for _, b := range c.Brokers {
			host, _, err := net.SplitHostPort(b)
			if err != nil {
				bad("brokers", "got %q; want host:port", b)
			} else if !c.Remote && !loopback(host) {
				bad("brokers", "host %q is not a loopback address (--remote allows it)", host)
			}
		}
		if c.Group == "" {
			bad("group", "is empty")
		}
		positive("lag-window", c.LagWindow)
		if c.Drain < 0 {
			bad("drain", "got %s; want 0 or more", c.Drain)
		}
		positive("probe-every", c.ProbeEvery)
		positive("probe-poll", c.ProbePoll)
		positive("probe-timeout", c.ProbeWait)
	}
	if c.Duration <= 0 || c.Duration > maxDuration {
		bad("duration", "got %s; want more than 0 and at most %s", c.Duration, maxDuration)
	}
	if c.RunID != "" && !idChars(c.RunID) {
		bad("run-id", "got %q; want 1..64 letters, digits, '-' or '_'", c.RunID)
	}
	positive("timeout", c.Timeout)
	if c.Warmup < 0 {
		bad("warmup", "got %s; want 0 or more", c.Warmup)
	}
	if c.Progress < 0 {
		bad("progress", "got %s; want 0 or more", c.Progress)
	}
	inRange := func(flag string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(flag, "got %d; want %d..%d", v, lo, hi)
		}
	}
	inRange("items", c.Items, 1, 10_000_000)
	inRange("max-inflight", c.MaxInflight, 1, maxConcurrency)
	if c.Scenarios.ViewCounts {
		inRange("count-rate", c.CountRate, 1, maxRate)
		inRange("count-batch", c.CountBatch, 1, 10000)
		inRange("count-views", c.CountViews, 1, 1_000_000_000)
		inRange("concurrency", c.Concurrency, 1, maxConcurrency)
	}
	if c.Scenarios.Views {
		inRange("rate", c.Rate, 1, maxRate)
		inRange("batch", c.Batch, 1, 10000)
		inRange("concurrency", c.Concurrency, 1, maxConcurrency)
		inRange("viewers", c.Viewers, 1, 1_000_000_000)
		if c.HotShare < 0 || c.HotShare > 1 {
			bad("hot-share", "got %g; want 0..1", c.HotShare)
		}
	}
	if c.Scenarios.Clicks {
		inRange("click-rate", c.ClickRate, 1, maxRate)
		inRange("click-batch", c.ClickBatch, 1, 10000)
		inRange("click-concurrency", c.ClickConcurrency, 1, maxConcurrency)
		if c.ClickGroup == "" {
			bad("click-group", "is empty")
		}
	}
	if c.Scenarios.Reads {
		inRange("read-rate", c.ReadRate, 1, maxRate)
		inRange("read-ids", c.ReadIDs, 1, 100)
		inRange("catalog", c.Catalog, 1, 10_000_000)
	}
	if c.Scenarios.Counters {
		if c.CounterMode != "best_effort" && c.CounterMode != "eventual" && c.CounterMode != "accurate" {
			bad("counter-mode", "got %q; want best_effort, eventual or accurate", c.CounterMode)
		}
		inRange("counter-rate", c.CounterRate, 0, maxRate)
		if c.CounterRate == 0 && c.CounterReadRate == 0 {
			bad("counter-rate", "got 0 with --counter-read-rate 0; want adds, reads or both")
		}
		inRange("counter-batch", c.CounterBatch, 1, 1000)
		inRange("counter-concurrency", c.CounterConcurrency, 1, maxConcurrency)
		inRange("counter-names", c.CounterNames, 1, 10_000_000)
		inRange("counter-read-rate", c.CounterReadRate, 0, maxRate)
		inRange("counter-read-names", c.CounterReadNames, 1, 100)
		if c.CounterHotShare < 0 || c.CounterHotShare > 1 {
			bad("counter-hot-share", "got %g; want 0..1", c.CounterHotShare)
		}
	}
	if c.Scenarios.Likes {
		inRange("like-rate", c.LikeRate, 1, maxRate)
		inRange("users", c.Users, 1, 100_000_000)
		inRange("liked-by-rate", c.LikedByRate, 0, maxRate)
		inRange("liked-by-ids", c.LikedByIDs, 1, 100)
	}
	return errors.Join(errs...)
}

// kafkaFromEnv is how the lag monitor reaches the brokers, from the environment variables every
// tally binary reads (config.EnvName).
func kafkaFromEnv(getenv func(string) string) kafka.Security {
	env := func(key string) string { return getenv(config.EnvName(key)) }
	return kafka.Security{SASLMechanism: env("kafka.sasl.mechanism"), Username: env("kafka.sasl.username"),
		Password: env("kafka.sasl.password"), TokenFile: env("kafka.sasl.token_file"),
		TLS: tlsconf.Files{Enabled: env("kafka.tls.enabled") == "true", CAFile: env("kafka.tls.ca_file"), ServerName: env("kafka.tls.server_name")}}
}

// loopback reports whether host names this machine: "localhost" or a loopback IP. Other names
// are not resolved, so a DNS answer cannot point the load elsewhere.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func idChars(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
