package auth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// User tokens are HS256 JWTs whose "sub" is the user id and whose "exp" bounds their life;
// "nbf" and "iat" are honoured when present. Whoever signs users in (the app's own auth
// service) mints them with the shared collector.auth.user_token_key and any JWT library;
// MintUserToken and `collector token` do the same for tests and operators.

// MintUserToken returns a token naming user, valid from now for ttl, signed with key.
func MintUserToken(key []byte, user string, now time.Time, ttl time.Duration) (string, error) {
	if len(key) == 0 {
		return "", errors.New("mint user token: the signing key is empty")
	}
	if user == "" || ttl <= 0 {
		return "", fmt.Errorf("mint user token: got user %q and ttl %s; want a user and a positive ttl", user, ttl)
	}
	claims := jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("mint user token: %w", err)
	}
	return s, nil
}

// VerifyUserToken checks token (the compact JWT) against key at now and returns its user.
// Only HS256 is accepted, so a token cannot choose a weaker algorithm ("none") or confuse the
// HMAC key with a public key.
func VerifyUserToken(key []byte, token string, now time.Time) (string, error) {
	if len(key) == 0 {
		return "", errors.New("user tokens are not accepted: collector.auth.user_token_key is not set")
	}
	if token == "" {
		return "", errors.New("no user token: send Authorization: Bearer <token>")
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", errors.New("the user token has expired")
	case err != nil:
		return "", fmt.Errorf("the user token is invalid: %w", err)
	case claims.Subject == "":
		return "", errors.New("the user token names no user (sub)")
	}
	return claims.Subject, nil
}

// verifyUserToken reads the token from an Authorization header value.
func (g *Guard) verifyUserToken(header string, now time.Time) (string, error) {
	scheme, token, _ := strings.Cut(header, " ")
	if header != "" && !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("the Authorization header has scheme %q; want Bearer <user token>", scheme)
	}
	return VerifyUserToken(g.tokenKey, strings.TrimSpace(token), now)
}
