package api

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
)

// heldResponse keeps a handler's answer — status, headers, body — until it
// is released to the client or discarded for another answer.
type heldResponse struct {
	resp   *echo.Response
	writer http.ResponseWriter
	header http.Header
	status int
	body   bytes.Buffer
}

// hold makes resp write into a heldResponse until it is released.
func hold(resp *echo.Response) *heldResponse {
	h := &heldResponse{resp: resp, writer: resp.Writer, header: resp.Writer.Header().Clone()}
	resp.Writer = h
	return h
}

func (h *heldResponse) Header() http.Header { return h.header }

func (h *heldResponse) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}

func (h *heldResponse) Write(p []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(p)
}

// release writes what was held, if anything, to the client.
func (h *heldResponse) release() error {
	h.resp.Writer = h.writer
	if h.status == 0 {
		return nil
	}
	maps.Copy(h.writer.Header(), h.header)
	h.writer.WriteHeader(h.status)
	_, err := h.writer.Write(h.body.Bytes())
	return err
}

// discard drops what was held, so the request can be answered anew.
func (h *heldResponse) discard() {
	h.resp.Writer = h.writer
	h.resp.Committed, h.resp.Status, h.resp.Size = false, 0, 0
}

// auditNote lets a handler name what an audited request created when the
// request did not (a volume created under an Idempotency-Key), and mark a
// request that used an explicit override with an action of its own.
type auditNote struct{ volume, action string }

type auditNoteKey struct{}

// Actions of their own for requests that override a safeguard, so the
// audit trail (and `audit --action`) finds them apart from the ordinary
// ones: a registration or update that lets an environment share its
// cluster namespaces, an adoption that takes claims over.
const (
	ActionCreateSharingNamespaces = "createEnvironmentSharingNamespaces"
	ActionUpdateSharingNamespaces = "updateEnvironmentSharingNamespaces"
	ActionAdoptTakingOver         = "adoptVolumesTakingOver"
)

// OverrideActions are the actions of their own above.
var OverrideActions = []string{ActionCreateSharingNamespaces, ActionUpdateSharingNamespaces, ActionAdoptTakingOver}

// AuditedActions lists, sorted, every action an audit event can name: the
// id of each audited operation of the contract (every write, and every
// admin-only read) and the override actions.
func AuditedActions() ([]string, error) {
	spec, err := Contract()
	if err != nil {
		return nil, err
	}
	actions := slices.Clone(OverrideActions)
	for _, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			if describeOperation(method, op).audited {
				actions = append(actions, op.OperationID)
			}
		}
	}
	slices.Sort(actions)
	return actions, nil
}

// noteAction records the action a request is audited under, in place of
// its operation's.
func noteAction(ctx context.Context, action string) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.action = action
	}
}

// noteVolume records the volume a request created for its audit record.
func noteVolume(ctx context.Context, id string) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.volume = id
	}
}
