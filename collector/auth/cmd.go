package auth

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/platform/config"
)

// IsCommand reports whether args (without the program name) ask for one of Command's tools
// rather than for the server.
func IsCommand(args []string) bool {
	return len(args) > 0 && (args[0] == "keys" || args[0] == "token")
}

// CommandEnv is what Command reads and writes.
type CommandEnv struct {
	Getenv func(string) string // the user-token key comes from the environment, never a flag (ps shows flags)
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Now    func() time.Time
}

const commandUsage = `Usage:
  collector keys new --id ID --scopes ingest,read [--rate 100] [--burst 200]
      mint an API key: prints the secret (give it to the client, store it nowhere else) and
      the collector.auth.keys entry holding its hash
  collector keys hash < secret
      print the SHA-256 of the secret read from the first line of stdin
  collector token --user USER [--ttl 1h]
      mint a user token for likes, signed with the key in TALLY_COLLECTOR_AUTH_USER_TOKEN_KEY
`

// Command runs the key and token tools and returns the exit code: 0 done, 2 usage error.
func Command(args []string, env CommandEnv) int {
	err := command(args, env)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprint(env.Stdout, commandUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "collector %s: %v\n\n%s", strings.Join(args[:min(len(args), 2)], " "), err, commandUsage)
		return 2
	}
	return 0
}

func command(args []string, env CommandEnv) error {
	fs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch {
	case len(args) >= 2 && args[0] == "keys" && args[1] == "new":
		id := fs.String("id", "", "key id (names the client in logs and metrics)")
		scopes := fs.StringSlice("scopes", nil, "scopes: ingest, read, like, fraud, billing, admin")
		rate := fs.Float64("rate", 100, "requests per second")
		burst := fs.Int("burst", 200, "requests at once above the rate")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		secret := NewSecret()
		k := collectorconf.APIKey{ID: *id, SHA256: HashSecret(secret), Scopes: *scopes, Rate: *rate, Burst: *burst}
		if _, err := New(Options{Keys: []collectorconf.APIKey{k}}); err != nil || *id == "" || len(*scopes) == 0 {
			return fmt.Errorf("want --id and --scopes, rate and burst above 0 (%v)", err)
		}
		fmt.Fprintf(env.Stdout, "secret (send as %s; shown once): %s\n\ncollector.auth.keys entry:\n"+
			"  - id: %q\n    sha256: %q\n    scopes: [%s]\n    rate: %g\n    burst: %d\n\ncompact form (flag, TALLY_COLLECTOR_AUTH_KEYS): %s:%s:%s:%g:%d\n",
			KeyHeader, secret, k.ID, k.SHA256, strings.Join(k.Scopes, ", "), k.Rate, k.Burst,
			k.ID, k.SHA256, strings.Join(k.Scopes, "+"), k.Rate, k.Burst)
		return nil
	case len(args) >= 2 && args[0] == "keys" && args[1] == "hash":
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		line, err := bufio.NewReader(env.Stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the secret from stdin: %w", err)
		}
		secret := strings.TrimRight(line, "\r\n")
		if len(secret) < 32 {
			return fmt.Errorf("the secret on stdin is %d bytes; want at least 32 random bytes (mint one with `collector keys new`)", len(secret))
		}
		fmt.Fprintln(env.Stdout, HashSecret(secret))
		return nil
	case len(args) >= 1 && args[0] == "token":
		user := fs.String("user", "", "user id the token names")
		ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		name := config.EnvName("collector.auth.user_token_key")
		key := env.Getenv(name)
		if len(key) < collectorconf.MinUserTokenKey {
			return fmt.Errorf("%s is %d bytes; want the collector's user-token key (at least %d bytes)", name, len(key), collectorconf.MinUserTokenKey)
		}
		tok, err := MintUserToken([]byte(key), *user, env.Now(), *ttl)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, tok)
		return nil
	case len(args) == 2 && args[0] == "keys" && (args[1] == "-h" || args[1] == "--help"):
		return pflag.ErrHelp
	}
	return errors.New("unknown command")
}
