package dcm

import (
	"context"
	"errors"
	"fmt"
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

// httpClient is the client for DCM's API with those credentials.
func (c Credentials) httpClient() (*http.Client, error) {
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
		return &http.Client{Timeout: requestTimeout}, nil
	}
	return &http.Client{Timeout: requestTimeout, Transport: &oauth2.Transport{Source: source, Base: http.DefaultTransport}}, nil
}

// fileToken reads the bearer token from a file for every request.
type fileToken string

func (f fileToken) Token() (*oauth2.Token, error) {
	token, err := readToken(string(f))
	if err != nil {
		return nil, err
	}
	return &oauth2.Token{AccessToken: token, TokenType: "Bearer"}, nil
}

// readToken reads a one-line secret. Errors name the file, never its content.
func readToken(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("DCM credentials: %w", err)
	}
	if info.Size() > maxTokenFileSize {
		return "", fmt.Errorf("DCM credentials: %s is larger than %d bytes", path, maxTokenFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("DCM credentials: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return "", errors.New("DCM credentials: " + path + " must hold one token and nothing else")
	}
	return token, nil
}
