// Command collector serves the HTTP API: events in (to Kafka), counts out. `collector keys` and
// `collector token` mint API keys and user tokens for its access control (docs/SECURITY.md).
package main

import (
	"os"
	"time"

	"tally/collector"
	"tally/collector/auth"
	"tally/platform/cli"
	"tally/platform/config"
	"tally/platform/lifecycle"
)

func main() {
	if auth.IsCommand(os.Args[1:]) {
		os.Exit(auth.Command(os.Args[1:], auth.CommandEnv{Getenv: os.Getenv, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Now: time.Now}))
	}
	var settings collector.Settings
	os.Exit(cli.Run(cli.Command{Name: "collector", Args: os.Args[1:], Standalone: true, Sections: []config.Section{&settings}, Parts: func(e cli.Env) ([]lifecycle.Part, error) {
		parts, _ := collector.Parts(e, &settings)
		return parts, nil
	}}))
}
