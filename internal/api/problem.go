package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/postgres"
)

// problemContentType is the RFC 9457 media type for error bodies.
const problemContentType = "application/problem+json"

// problemTypes maps HTTP status codes to the AEP-style problem types the
// contract allows; anything unlisted is INTERNAL.
var problemTypes = map[int]ProblemType{
	http.StatusBadRequest:            INVALIDARGUMENT,
	http.StatusUnauthorized:          UNAUTHENTICATED,
	http.StatusForbidden:             PERMISSIONDENIED,
	http.StatusNotFound:              NOTFOUND,
	http.StatusMethodNotAllowed:      METHODNOTALLOWED,
	http.StatusConflict:              ALREADYEXISTS,
	http.StatusRequestEntityTooLarge: INVALIDARGUMENT,
	http.StatusUnsupportedMediaType:  UNSUPPORTEDMEDIATYPE,
	http.StatusUnprocessableEntity:   FAILEDPRECONDITION,
	http.StatusTooManyRequests:       UNAVAILABLE,
	http.StatusServiceUnavailable:    UNAVAILABLE,
}

// problemHandler turns every error a handler or middleware returns into one
// problem+json response. Unexpected errors are logged with the request id and
// answered with a generic INTERNAL problem that leaks nothing.
func problemHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		if postgres.Unavailable(err) {
			logger.WarnContext(c.Request().Context(), "request failed: the database is unavailable", "error", err,
				"path", c.Request().URL.Path)
			err = fault.RetryLater(2*time.Second, "the database is unavailable for a moment; retry shortly")
		}
		p := toProblem(err)
		if fe, ok := fault.As(err); ok && fe.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(fe.RetryAfter.Seconds()))))
		}
		if p.Type == INTERNAL {
			logger.ErrorContext(c.Request().Context(), "request failed",
				"error", err,
				"path", c.Request().URL.Path,
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		}
		instance := c.Request().URL.Path
		p.Instance = &instance
		body, _ := json.Marshal(p)
		c.Response().Header().Set(echo.HeaderContentType, problemContentType)
		c.Response().WriteHeader(p.Status)
		if c.Request().Method != http.MethodHead {
			_, _ = c.Response().Write(body)
		}
	}
}

// faultTypes maps a use case's error kind to its problem type (its status
// is the kind's, fault.Kind.HTTPStatus).
var faultTypes = map[fault.Kind]ProblemType{
	fault.InvalidArgument:    INVALIDARGUMENT,
	fault.NotFound:           NOTFOUND,
	fault.AlreadyExists:      ALREADYEXISTS,
	fault.Conflict:           FAILEDPRECONDITION,
	fault.FailedPrecondition: FAILEDPRECONDITION,
	fault.Unavailable:        UNAVAILABLE,
}

func toProblem(err error) Problem {
	if fe, ok := fault.As(err); ok {
		if typ, ok := faultTypes[fe.Kind]; ok {
			status := fe.Kind.HTTPStatus()
			p := Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: &fe.Detail}
			if fe.Field != "" {
				field := fe.Field
				p.Field = &field
				detail := fe.Error()
				p.Detail = &detail
			}
			return p
		}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		typ, ok := problemTypes[he.Code]
		if !ok || he.Code >= http.StatusInternalServerError && he.Code != http.StatusServiceUnavailable {
			return internalProblem()
		}
		detail := http.StatusText(he.Code)
		if msg, ok := he.Message.(string); ok && msg != "" {
			detail = msg
		}
		return Problem{Type: typ, Title: http.StatusText(he.Code), Status: he.Code, Detail: &detail}
	}
	return internalProblem()
}

func internalProblem() Problem {
	detail := "an unexpected error occurred"
	return Problem{Type: INTERNAL, Title: http.StatusText(http.StatusInternalServerError), Status: http.StatusInternalServerError, Detail: &detail}
}
