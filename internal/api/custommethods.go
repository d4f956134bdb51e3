package api

import (
	"strings"

	"github.com/labstack/echo/v4"
)

// customMethodRouter serves AEP-136 custom methods such as
// POST /environments/{id}:verify. Echo's router matches a path parameter up
// to the next "/", so it cannot route a parameter followed by ":verb" in the
// same segment; the generated code registers those routes with an escaped
// colon that echo would read as part of the parameter's name. This router
// registers one POST route per prefix instead and dispatches on the verb
// suffix of the last parameter, stripping it before the handler reads it.
type customMethodRouter struct {
	EchoRouter
	verbs map[string]map[string]echo.HandlerFunc
}

func newCustomMethodRouter(r EchoRouter) *customMethodRouter {
	return &customMethodRouter{EchoRouter: r, verbs: map[string]map[string]echo.HandlerFunc{}}
}

// POST registers h; a path ending in `\:verb` becomes a verb of its prefix.
func (r *customMethodRouter) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) *echo.Route {
	prefix, verb, ok := strings.Cut(path, `\:`)
	if !ok {
		return r.EchoRouter.POST(path, h, m...)
	}
	for i := len(m) - 1; i >= 0; i-- {
		h = m[i](h)
	}
	var route *echo.Route
	if r.verbs[prefix] == nil {
		r.verbs[prefix] = map[string]echo.HandlerFunc{}
		route = r.EchoRouter.POST(prefix, r.dispatch(prefix))
	}
	r.verbs[prefix][verb] = h
	return route
}

func (r *customMethodRouter) dispatch(prefix string) echo.HandlerFunc {
	return func(c echo.Context) error {
		values := c.ParamValues()
		if len(values) == 0 {
			return echo.ErrNotFound
		}
		last := len(values) - 1
		// The verb follows the last colon, as the contract's router (and
		// so the guard) reads the path.
		i := strings.LastIndexByte(values[last], ':')
		if i < 0 {
			return echo.ErrNotFound
		}
		h := r.verbs[prefix][values[last][i+1:]]
		if h == nil {
			return echo.ErrNotFound
		}
		values[last] = values[last][:i]
		c.SetParamValues(values...)
		return h(c)
	}
}
