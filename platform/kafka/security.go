package kafka

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tallypipeline/tally/platform/tlsconf"
)

// SASL mechanisms tally's clients speak. SCRAM never sends the password itself, so it is safe
// even on a link without TLS (though the records still travel in clear text). PLAIN sends the
// password as it is and OAUTHBEARER a bearer token, so both are refused without TLS: they are
// what hosted clusters ask for, always over TLS.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	Plain       = "PLAIN"
	OAuthBearer = "OAUTHBEARER"
)

// mechanisms lists them for error messages.
const mechanisms = ScramSHA256 + ", " + ScramSHA512 + ", " + Plain + " or " + OAuthBearer

// Security is how every client authenticates to the brokers and protects the link. The zero
// value is a plain, unauthenticated connection (the embedded broker's).
type Security struct {
	SASLMechanism string // "", ScramSHA256, ScramSHA512, Plain or OAuthBearer
	Username      string // SCRAM and PLAIN
	Password      string
	// TokenFile holds the OAUTHBEARER token, read again at every authentication, so that the
	// agent that refreshes it (a sidecar, a cron) needs no restart of tally.
	TokenFile string
	// Token, when set, is where OAUTHBEARER tokens come from instead of TokenFile: the hook of a
	// program that links tally's packages and fetches tokens itself. Called at every
	// authentication.
	Token func(ctx context.Context) (string, error)
	TLS   tlsconf.Files
}

// Options are the client options for s: kgo.SASL and kgo.DialTLSConfig as configured, to be
// appended to ClientOptions. An error names what is wrong.
func (s Security) Options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	mech, err := s.Mechanism()
	if err != nil {
		return nil, fmt.Errorf("kafka SASL: %w", err)
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	tc, err := s.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("kafka TLS: %w", err)
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}

// Mechanism is the SASL mechanism s configures, nil for none; Options adds it to the clients.
// Its error says what is wrong with the settings; it neither connects nor reads the token.
func (s Security) Mechanism() (sasl.Mechanism, error) {
	switch s.SASLMechanism {
	case "":
		if s.Username != "" || s.Password != "" || s.TokenFile != "" {
			return nil, fmt.Errorf("credentials are set but no mechanism (want %s)", mechanisms)
		}
		return nil, nil
	case ScramSHA256, ScramSHA512, Plain:
		if s.Username == "" || s.Password == "" {
			return nil, fmt.Errorf("%s needs a username and a password", s.SASLMechanism)
		}
	case OAuthBearer:
		if (s.TokenFile == "") == (s.Token == nil) || s.Username != "" || s.Password != "" {
			return nil, fmt.Errorf("%s needs a token file (kafka.sasl.token_file), and no username or password", OAuthBearer)
		}
	default:
		return nil, fmt.Errorf("mechanism %q; want %s (upper case)", s.SASLMechanism, mechanisms)
	}
	if (s.SASLMechanism == Plain || s.SASLMechanism == OAuthBearer) && !s.TLS.Enabled {
		return nil, fmt.Errorf("%s sends its secret as it is, so it needs TLS (kafka.tls.enabled)", s.SASLMechanism)
	}
	up := scram.Auth{User: s.Username, Pass: s.Password}
	switch s.SASLMechanism {
	case ScramSHA256:
		return up.AsSha256Mechanism(), nil
	case ScramSHA512:
		return up.AsSha512Mechanism(), nil
	case Plain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	}
	token := s.Token
	if token == nil {
		token = s.readToken
	}
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		t, err := token(ctx)
		if err != nil {
			return oauth.Auth{}, fmt.Errorf("%s token: %w", OAuthBearer, err)
		}
		return oauth.Auth{Token: t}, nil
	}), nil
}

// readToken reads the token in TokenFile, without the blanks around it.
func (s Security) readToken(context.Context) (string, error) {
	b, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s is empty", s.TokenFile)
	}
	return t, nil
}
