package api

import (
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/forwarding"
	"github.com/dcm-project/storage-gateway/internal/logging"
)

// forward hands the request to env's owner on behalf of p and copies its
// answer; an error says nothing was written (no live owner: 503 with
// Retry-After).
func (g *guard) forward(c echo.Context, op operation, env string, p auth.Principal) error {
	req := c.Request()
	var body []byte
	if op.bodyLimit > 0 && req.Body != nil && req.Body != http.NoBody {
		// Read and bounded by validated already: this reads it from memory.
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return err
		}
	}
	return g.forwarding.Forward(c.Response(), req, env, forwarding.Envelope{
		Principal: p, Peer: req.RemoteAddr, RequestID: logging.RequestID(req.Context()),
	}, body)
}
