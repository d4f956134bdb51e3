package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/labstack/echo/v4"

	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/volumes"
)

// describeValidation turns a contract violation into an InvalidArgument that
// names the offending field by its JSON path (`spec.capacity`,
// `allowed_namespaces[1]`) or parameter name, and says what was expected:
// an unknown field, a missing required one, the allowed values, the
// pattern, the type, the length. It is rebuilt from the error's structured
// parts: the library's own message can quote the submitted value.
func describeValidation(err error) error {
	var reqErr *openapi3filter.RequestError
	if !errors.As(err, &reqErr) {
		return fault.Invalid("body", "does not match the API contract")
	}
	if reqErr.RequestBody != nil && strings.HasPrefix(reqErr.Reason, "header Content-Type") {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType, "unsupported Content-Type for this operation")
	}
	field := "body"
	if reqErr.Parameter != nil {
		field = reqErr.Parameter.Name
	}
	if leaf := mostSpecific(reqErr.Err); leaf != nil {
		path, reason := describeSchemaError(leaf)
		if reqErr.Parameter == nil && len(path) > 0 {
			field = jsonPath(path)
		} else if len(path) > 0 {
			field += jsonPath(append([]string{""}, path...))
		}
		return fault.Invalid(field, "%s", reason)
	}
	reason := "is invalid"
	var parseErr *openapi3filter.ParseError
	switch {
	case reqErr.Err != nil && errors.Is(reqErr.Err, openapi3filter.ErrInvalidRequired):
		reason = "is required"
	case reqErr.RequestBody != nil && reqErr.Err == nil:
		reason = "is required"
	case errors.As(reqErr.Err, &parseErr):
		reason = "could not be parsed as the declared type"
	case reqErr.Err != nil && errors.Is(reqErr.Err, openapi3filter.ErrInvalidEmptyValue):
		reason = "must not be empty"
	}
	return fault.Invalid(field, "%s", reason)
}

// mostSpecific is the schema error that says most exactly what is wrong:
// the deepest in the document. A body that matches no branch of a oneOf
// (the two request shapes of a volume) is held to the branch it looks most
// like, so that branch's error is reported rather than "matches no schema".
func mostSpecific(err error) *openapi3.SchemaError {
	var best *openapi3.SchemaError
	for _, leaf := range schemaErrorLeaves(err) {
		if best == nil || len(leaf.JSONPointer()) > len(best.JSONPointer()) {
			best = leaf
		}
	}
	return best
}

// schemaErrorLeaves collects the schema errors that are not themselves a
// combination of other errors (oneOf, anyOf, allOf), depth first.
func schemaErrorLeaves(err error) []*openapi3.SchemaError {
	// The chain is walked one link at a time (the default case unwraps), so
	// a link's own type is what counts, not the first match errors.As finds.
	switch e := err.(type) { //nolint:errorlint // see above
	case nil:
		return nil
	case openapi3.MultiError:
		var out []*openapi3.SchemaError
		for _, one := range e {
			out = append(out, schemaErrorLeaves(one)...)
		}
		return out
	case *openapi3.SchemaError:
		switch e.SchemaField {
		case "oneOf", "anyOf", "allOf":
			// Origin wraps the branches' errors (a MultiError beneath).
			for inner := e.Origin; inner != nil; inner = errors.Unwrap(inner) {
				if me, ok := inner.(openapi3.MultiError); ok { //nolint:errorlint // walked link by link

					if i := closestBranch(e, me); i >= 0 {
						return schemaErrorLeaves(me[i])
					}
					return schemaErrorLeaves(me)
				}
			}
		}
		return []*openapi3.SchemaError{e}
	}
	return schemaErrorLeaves(errors.Unwrap(err))
}

// closestBranch is the index of the oneOf/anyOf branch whose properties
// share most keys with the object that failed all of them, or -1 when that
// cannot be told (not an object, a tie, or not one error per branch).
func closestBranch(e *openapi3.SchemaError, branchErrors openapi3.MultiError) int {
	branches := e.Schema.OneOf
	if e.SchemaField == "anyOf" {
		branches = e.Schema.AnyOf
	}
	obj, ok := e.Value.(map[string]any)
	if !ok || len(branches) != len(branchErrors) {
		return -1
	}
	best, bestShared, tie := -1, -1, false
	for i, b := range branches {
		shared := 0
		for k := range obj {
			if _, ok := b.Value.Properties[k]; ok {
				shared++
			}
		}
		switch {
		case shared > bestShared:
			best, bestShared, tie = i, shared, false
		case shared == bestShared:
			tie = true
		}
	}
	if tie {
		return -1
	}
	return best
}

// Reasons of kin-openapi that name a property: it belongs in the path.
var (
	unsupportedProperty = regexp.MustCompile(`^property "(.*)" is unsupported$`)
	missingProperty     = regexp.MustCompile(`^property "(.*)" is missing$`)
	allowedValues       = regexp.MustCompile(`^value is not one of the allowed values (\[.*\])$`)
)

// patternRules say in words what each pattern of the contract asks for, so
// a refusal never repeats a regular expression to a caller (a test keeps
// every pattern of the contract here).
var patternRules = map[string]string{
	volumes.CapacityPattern: volumes.CapacityRule,
	// AEP-122 ids: environments, volumes, snapshots, names.
	`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`: "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
	// Audit actions are operation ids.
	`^[A-Za-z]{1,64}$`: "must be an operation id: 1-64 letters, e.g. createVolume",
}

// describeSchemaError returns the path of the value a schema error is about
// and what was expected of it.
func describeSchemaError(e *openapi3.SchemaError) (path []string, reason string) {
	path = e.JSONPointer()
	if e.SchemaField == "pattern" && e.Schema != nil {
		if rule, ok := patternRules[e.Schema.Pattern]; ok {
			return path, rule
		}
		return path, "is not in the expected format"
	}
	if m := unsupportedProperty.FindStringSubmatch(e.Reason); m != nil {
		// A client's key is repeated back only if it is plain.
		if fe := fault.UnknownField(m[1]); fe.Field == "body" {
			return path, "has an unknown field"
		}
		return append(path, m[1]), "is not a known field"
	}
	if m := missingProperty.FindStringSubmatch(e.Reason); m != nil {
		// The pointer names the missing property already.
		if len(path) == 0 || path[len(path)-1] != m[1] {
			path = append(path, m[1])
		}
		return path, "is required"
	}
	if m := allowedValues.FindStringSubmatch(e.Reason); m != nil {
		var values []any
		if json.Unmarshal([]byte(m[1]), &values) == nil {
			names := make([]string, len(values))
			for i, v := range values {
				names[i] = strconv.Quote(jsonText(v))
			}
			return path, "must be one of " + strings.Join(names, ", ")
		}
	}
	return path, e.Reason
}

func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	raw, _ := json.Marshal(v)
	return string(raw)
}

// jsonPath writes a JSON pointer's segments as a dotted path with array
// indexes in brackets: spec, metadata, name -> spec.metadata.name;
// allowed_namespaces, 1 -> allowed_namespaces[1].
func jsonPath(segments []string) string {
	var b strings.Builder
	for i, s := range segments {
		if _, err := strconv.Atoi(s); err == nil && i > 0 {
			b.WriteString("[" + s + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// StorageSpecRules returns the check a DCM StorageSpec that arrives another
// way than the API (DCM's agent dispatch carries it on NATS) is held to: the
// contract's StorageSpec schema, as the API checks a create's body — an
// unknown provider_hints.kubernetes key or a name out of pattern is refused
// the same way, the field named under spec.
func StorageSpecRules() (func(spec json.RawMessage) error, error) {
	doc, err := Contract()
	if err != nil {
		return nil, err
	}
	ref := doc.Components.Schemas["StorageSpec"]
	if ref == nil || ref.Value == nil {
		return nil, errors.New("the contract has no StorageSpec schema")
	}
	schema := ref.Value
	return func(spec json.RawMessage) error {
		var value any
		if err := json.Unmarshal(spec, &value); err != nil {
			return fault.Invalid("spec", "is not JSON")
		}
		err := schema.VisitJSON(value, openapi3.VisitAsRequest())
		if err == nil {
			return nil
		}
		if leaf := mostSpecific(err); leaf != nil {
			path, reason := describeSchemaError(leaf)
			return fault.Invalid(jsonPath(append([]string{"spec"}, path...)), "%s", reason)
		}
		return fault.Invalid("spec", "does not match DCM's StorageSpec")
	}, nil
}
