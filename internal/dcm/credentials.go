package dcm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// maxTokenFileSize bounds a token or client secret file.
const maxTokenFileSize = 64 << 10

// Credentials are how the gateway authenticates to DCM's API, once DCM
// requires it: a bearer token from a file (re-read for every call, so a
// rotated projected token is picked up), or OAuth 2.0 client credentials
// (tokens fetched from TokenURL and refreshed before they expire). All
// empty: no Authorization header, as DCM's service-provider-manager
// v0.1.0-rc.1 expects.
type Credentials struct {
	TokenFile        string
	ClientID         string
	ClientSecretFile string
	TokenURL         string
}

// httpClient is the client for DCM's API with those credentials. Its
// connections stay open for the calls of every worker at once (the
// default keeps two idle: the agents' heartbeats, four at a time, would
// open and close connections all day).
func (c Credentials) httpClient() (*http.Client, error) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 2 * registrationWorkers
	var source oauth2.TokenSource
	switch {
	case c.TokenFile != "":
		if _, err := readToken(c.TokenFile); err != nil {
			return nil, err
		}
		source = fileToken(c.TokenFile)
	case c.ClientID != "":
		secret, err := readToken(c.ClientSecretFile)
		if err != nil {
			return nil, err
		}
		cc := clientcredentials.Config{ClientID: c.ClientID, ClientSecret: secret, TokenURL: c.TokenURL}
		tokenClient := &http.Client{Timeout: requestTimeout}
		// The token source lives as long as the registrar; the context only
		// carries the client it fetches tokens with.
		source = cc.TokenSource(context.WithValue(context.Background(), oauth2.HTTPClient, tokenClient))
	default:
		return &http.Client{Timeout: requestTimeout, CheckRedirect: noRedirects, Transport: base}, nil
	}
	return &http.Client{Timeout: requestTimeout, CheckRedirect: noRedirects,
		Transport: &oauth2.Transport{Source: source, Base: base}}, nil
}

// noRedirects answers a redirect with itself: oauth2.Transport would put the
// token on the redirected request too, wherever it points.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// fileToken reads the bearer token from a file for every request.
type fileToken string

func (f fileToken) Token() (*oauth2.Token, error) {
	token, err := readToken(string(f))
	if err != nil {
		return nil, err
	}
	return &oauth2.Token{AccessToken: token, TokenType: "Bearer"}, nil
}

// readToken reads a one-line secret of at most maxTokenFileSize. Errors
// name the file, never its content. (A projected service account token is
// readable by its group, so the mode is not checked.)
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("DCM credentials: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileSize+1))
	if err != nil {
		return "", fmt.Errorf("DCM credentials: %w", err)
	}
	if len(data) > maxTokenFileSize {
		return "", fmt.Errorf("DCM credentials: %s is larger than %d bytes", path, maxTokenFileSize)
	}
	token := strings.TrimSpace(string(data))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", errors.New("DCM credentials: " + path + " must hold one token and nothing else")
	}
	return token, nil
}
