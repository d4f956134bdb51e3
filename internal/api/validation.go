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

	"github.com/dcm-project/storage-gateway/internal/fault"
)

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

func safeReason(reason string) string {
	m := unsupportedProperty.FindStringSubmatch(reason)
	if m == nil {
		return reason
	}
	if fe := fault.UnknownField(m[1]); fe.Field != "body" {
		return fmt.Sprintf("has an unknown field %q", m[1])
	}
	return "has an unknown field"
}
