package api

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/labstack/echo/v4"
	oapimiddleware "github.com/oapi-codegen/echo-middleware"

	"github.com/dcm-project/storage-gateway/internal/fault"
)

// requestValidator checks every request against the OpenAPI contract before
// a handler runs: unknown fields, types, enums, patterns and lengths. Its
// errors name the field and the rule, never the submitted value.
func requestValidator() echo.MiddlewareFunc {
	spec, err := GetSwagger()
	if err != nil {
		panic("api: embedded OpenAPI document is invalid: " + err.Error()) // generated from a checked-in file
	}
	spec.Servers = nil // match on path only, whatever Host the client used
	return oapimiddleware.OapiRequestValidatorWithOptions(spec, &oapimiddleware.Options{
		Options: openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		// Only the versioned API takes input; operations endpoints and routes
		// added outside the contract are not validated.
		Skipper: func(c echo.Context) bool { return !strings.HasPrefix(c.Request().URL.Path, "/api/") },
		ErrorHandler: func(_ echo.Context, he *echo.HTTPError) error {
			if he.Code == http.StatusNotFound {
				return echo.ErrNotFound
			}
			if he.Code == http.StatusMethodNotAllowed {
				return echo.ErrMethodNotAllowed
			}
			return describeValidation(he.Internal)
		},
	})
}

// describeValidation rebuilds a validation failure as an InvalidArgument
// from its structured parts; the library's own message can quote the value.
func describeValidation(err error) error {
	var reqErr *openapi3filter.RequestError
	if !errors.As(err, &reqErr) {
		return fault.Invalid("body", "does not match the API contract")
	}
	field, reason := "body", "is invalid"
	if reqErr.RequestBody != nil && strings.HasPrefix(reqErr.Reason, "header Content-Type") {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType, "unsupported Content-Type for this operation")
	}
	if reqErr.Parameter != nil {
		field = reqErr.Parameter.Name
	}
	var schemaErr *openapi3.SchemaError
	switch {
	case errors.As(reqErr.Err, &schemaErr):
		if ptr := schemaErr.JSONPointer(); len(ptr) > 0 {
			field = strings.Join(ptr, ".")
			if reqErr.Parameter != nil {
				field = reqErr.Parameter.Name
			}
		}
		reason = safeReason(schemaErr.Reason)
	case reqErr.Err != nil && errors.Is(reqErr.Err, openapi3filter.ErrInvalidRequired):
		reason = "is required"
	case reqErr.RequestBody != nil && reqErr.Err == nil:
		reason = "is required"
	case reqErr.Err != nil:
		var parseErr *openapi3filter.ParseError
		if errors.As(reqErr.Err, &parseErr) {
			reason = "could not be parsed as the declared type"
		} else if errors.Is(reqErr.Err, openapi3filter.ErrInvalidEmptyValue) {
			reason = "must not be empty"
		}
	}
	return fault.Invalid(field, "%s", reason)
}

// unsupportedProperty is kin-openapi's reason for an unknown field; it quotes
// the client's key.
var unsupportedProperty = regexp.MustCompile(`^property "(.*)" is unsupported$`)

// plainKey is a key short and plain enough to repeat back: anything else
// (say, a token pasted where a key belongs) is not echoed.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

func safeReason(reason string) string {
	m := unsupportedProperty.FindStringSubmatch(reason)
	if m == nil {
		return reason
	}
	if plainKey.MatchString(m[1]) {
		return fmt.Sprintf("has an unknown field %q", m[1])
	}
	return "has an unknown field"
}
