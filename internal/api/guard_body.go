package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/auth"
	"github.com/dcm-project/storage-gateway/internal/fault"
)

// validated checks the body's size and form, then the whole request against
// the contract, and runs the handler.
func (g *guard) validated(c echo.Context, op operation, route *routers.Route, params map[string]string, next echo.HandlerFunc) error {
	req := c.Request()
	if op.bodyLimit > 0 && req.Body != nil && req.Body != http.NoBody {
		body, err := readBody(req, op.bodyLimit)
		if err != nil {
			return err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	err := openapi3filter.ValidateRequest(req.Context(), &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
	if err != nil {
		return describeValidation(err)
	}
	return next(c)
}

// readBody reads at most limit bytes (413 beyond) and refuses what JSON
// decoders would accept but should not: a charset other than UTF-8, data
// after the JSON value, and nesting deeper than maxJSONDepth.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body must not exceed %d bytes", limit))
	}
	isJSON := false
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" {
		media, params, err := mime.ParseMediaType(ct)
		if err != nil {
			return nil, echo.NewHTTPError(http.StatusUnsupportedMediaType, "the Content-Type header cannot be parsed")
		}
		if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return nil, echo.NewHTTPError(http.StatusUnsupportedMediaType, "the body must be UTF-8 (charset=utf-8)")
		}
		isJSON = media == "application/json" || strings.HasSuffix(media, "+json")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, echo.NewHTTPError(http.StatusBadRequest, "the body could not be read")
	}
	if int64(len(body)) > limit {
		return nil, echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body must not exceed %d bytes", limit))
	}
	if !isJSON {
		return body, nil // the contract refuses the media type (415)
	}
	return body, checkJSON(body)
}

// checkJSON walks the body's tokens: one value, nested at most
// maxJSONDepth deep, and nothing after it but white space. An empty body is
// left to the contract (a required body is reported missing).
func checkJSON(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // 1e400 is valid JSON, if not a float64
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fault.Invalid("body", "is not valid JSON")
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxJSONDepth {
				return fault.Invalid("body", "is nested more than %d levels deep", maxJSONDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 && dec.More() {
			return fault.Invalid("body", "has data after the JSON value")
		}
	}
}

// statusOf is the status the request is answered with: the handler's, or
// the one its error maps to.
func statusOf(c echo.Context, err error) int {
	if err == nil {
		return c.Response().Status
	}
	return toProblem(err).Status
}

func joinRoles(roles []auth.Role) string {
	if len(roles) == 0 {
		return "no role"
	}
	return strings.Join(auth.RoleNames(roles), ", ")
}

// principal is the request's authenticated caller; every handler behind a
// role has one (the guard put it there).
func principal(ctx context.Context) auth.Principal {
	p, _ := auth.FromContext(ctx)
	return p
}
