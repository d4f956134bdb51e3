package egress

import (
	"errors"
	"net/http"
)

// ErrRedirect is returned (via NoRedirects) when a cluster answers with a
// redirect. Its text deliberately omits the status and the target, which may
// carry secrets.
var ErrRedirect = errors.New("egress: cluster answered with a redirect; redirects are never followed")

// NoRedirects is an [net/http.Client.CheckRedirect] func that refuses every
// redirect. Following one would send the bearer token to wherever the
// cluster points (client-go adds the token in its transport, so net/http's
// own header stripping on cross-host redirects does not protect it). The
// address policy cannot help either: the target may well be an allowed host.
//
// net/http wraps the returned error in a *url.Error whose URL field is the
// raw Location header, so err.Error() from Client.Do does contain the
// redirect target; callers that log or return the error must report the
// unwrapped error, not the *url.Error's text.
func NoRedirects(_ *http.Request, _ []*http.Request) error {
	return ErrRedirect
}
