package cli

import (
	"strings"
	"testing"
)

// TestGatewayURLWithoutScheme: host:port is plain http only on this
// machine; anywhere else a bearer token goes over https.
func TestGatewayURLWithoutScheme(t *testing.T) {
	for raw, want := range map[string]string{
		"127.0.0.1:8080":              "http://127.0.0.1:8080",
		"localhost:8080":              "http://localhost:8080",
		"[::1]:8080":                  "http://[::1]:8080",
		"gateway.example.com:8443":    "https://gateway.example.com:8443",
		"10.0.0.5:8080":               "https://10.0.0.5:8080",
		"http://10.0.0.5:8080/":       "http://10.0.0.5:8080",
		"https://gateway.example.com": "https://gateway.example.com",
	} {
		if got, err := gatewayURL(raw); err != nil || got != want {
			t.Errorf("gatewayURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://gateway", "http://user:pw@gateway", "http://gateway/?x=1", ""} {
		got, err := gatewayURL(bad)
		if err == nil {
			t.Errorf("gatewayURL(%q) = %q, want an error", bad, got)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("gatewayURL(%q) echoes the password: %v", bad, err)
		}
	}
}
