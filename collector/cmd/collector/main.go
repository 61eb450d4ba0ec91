// Command collector serves the HTTP API: events in (to Kafka), counts out. `collector keys` and
// `collector token` mint API keys and user tokens for its access control (docs/SECURITY.md);
// `collector schema` prints the Protobuf schema of the records it writes.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/tallypipeline/tally/collector"
	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/clickconf"
)

// commands are the sub-commands beside serving, for --help.
const commands = `  collector keys    mint an API key and the hashed entry collector.auth.keys holds
  collector token   mint a user token for a user id, signed with collector.auth.user_token_key
  collector schema  print the Protobuf schema of the records on the topics (tally.proto)
`

func main() {
	if auth.IsCommand(os.Args[1:]) {
		os.Exit(auth.Command(os.Args[1:], auth.CommandEnv{Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Now: time.Now}))
	}
	if len(os.Args) > 1 && os.Args[1] == "schema" {
		os.Exit(printSchema(os.Args[2:]))
	}
	var settings collectorconf.Settings
	// The counting rules are the clicks section's other part: the collector reads none of them,
	// but loads them so that a file's clicks section is checked whole (config.Section).
	var clickRules clickconf.Rules
	os.Exit(cli.Run(cli.Command{Name: "collector", Args: os.Args[1:], Commands: commands, Needs: config.Servers{Kafka: true, ClickHouse: true, Redis: true}, Sections: append(settings.Sections(), &clickRules), Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		parts, _ := collector.Parts(e, &settings)
		return parts, nil
	}}))
}

// printSchema runs `collector schema` and returns the exit code: 0 done, 2 bad usage.
func printSchema(args []string) int {
	switch {
	case len(args) == 1 && (args[0] == "--help" || args[0] == "-h"):
		fmt.Print("Usage: collector schema\n\nPrints tally.proto, the Protobuf schema of the records on tally's topics,\nfor protoc, kcat or a schema registry (deploy/README.md, \"Kafka\").\n")
		return 0
	case len(args) > 0:
		fmt.Fprintf(os.Stderr, "collector schema: unexpected argument %q\n", args[0])
		return 2
	}
	fmt.Print(schemas.ProtoSchema())
	return 0
}
