package controlplane

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Agent is an agent as the agent API answers it (Agent in
// api/agent/v1alpha1/openapi.yaml).
type Agent struct {
	ID            string    `json:"agent_id"`
	Name          string    `json:"name"`
	Environment   string    `json:"environment"`
	ServiceTypes  []string  `json:"service_types"`
	Cost          string    `json:"cost"`
	TopicName     string    `json:"topic_name"`
	HealthStatus  string    `json:"health_status"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	CreateTime    time.Time `json:"create_time"`
	UpdateTime    time.Time `json:"update_time"`
}

// The agents' health states (health_status in the OpenAPI document).
const (
	HealthReady       = "ready"
	HealthCongested   = "congested"
	HealthUnavailable = "unavailable"
)

// registration is AgentRegistrationRequest: every field required.
type registration struct {
	Name         *string   `json:"name"`
	Environment  *string   `json:"environment"`
	TopicName    *string   `json:"topic_name"`
	ServiceTypes *[]string `json:"service_types"`
	Cost         *string   `json:"cost"`
}

// heartbeat is HeartbeatRequest: both fields required.
type heartbeat struct {
	ConsumerLag *int64     `json:"consumer_lag"`
	Timestamp   *time.Time `json:"timestamp"`
}

// costs are the cost enum of AgentRegistrationRequest.
var costs = []string{"low", "medium-low", "medium", "medium-high", "high"}

// topicPattern is topic_name's pattern in the OpenAPI document; the service
// checks the prefix again (internal/agent/service/agent.go).
var topicPattern = regexp.MustCompile(`^dcm\.agent\..+`)

// routes serves the agent API under /api/v1alpha1.
func (cp *ControlPlane) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1alpha1/agents", cp.register)
	mux.HandleFunc("GET /api/v1alpha1/agents", cp.listAgents)
	mux.HandleFunc("GET /api/v1alpha1/agents/{agentId}", cp.getAgent)
	mux.HandleFunc("PUT /api/v1alpha1/agents/{agentId}/heartbeat", cp.heartbeat)
	// The stand-in's own way to ask for instances (the real control plane
	// places them through its catalog): what make run's walkthrough calls.
	mux.HandleFunc("POST /api/v1alpha1/service-type-instances", cp.createInstance)
	mux.HandleFunc("GET /api/v1alpha1/service-type-instances/{id}", cp.getInstance)
	mux.HandleFunc("DELETE /api/v1alpha1/service-type-instances/{id}", cp.deleteInstance)
	return mux
}

// instanceView is an instance as the stand-in's instance API shows it.
type instanceView struct {
	ID         string         `json:"id"`
	Agent      string         `json:"agent_name"`
	Status     string         `json:"status"`
	Message    string         `json:"message,omitempty"`
	OutputSpec map[string]any `json:"output_spec,omitempty"`
}

func (cp *ControlPlane) createInstance(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ServiceType string         `json:"service_type"`
		Spec        map[string]any `json:"spec"`
	}
	id := r.URL.Query().Get("id")
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || id == "" || in.ServiceType == "" {
		problem(w, http.StatusBadRequest, "validation-error", "Invalid request", "?id= and a body {service_type, spec} are required")
		return
	}
	if err := cp.Create(r.Context(), id, in.ServiceType, in.Spec); err != nil {
		problem(w, http.StatusUnprocessableEntity, "placement-error", "Not placed", err.Error())
		return
	}
	cp.showInstance(w, id)
}

func (cp *ControlPlane) getInstance(w http.ResponseWriter, r *http.Request) {
	cp.showInstance(w, r.PathValue("id"))
}

func (cp *ControlPlane) showInstance(w http.ResponseWriter, id string) {
	in, ok := cp.Instance(id)
	if !ok {
		problem(w, http.StatusNotFound, "not-found", "Instance not found", "no instance of this id")
		return
	}
	writeJSON(w, http.StatusOK, instanceView{ID: in.ResourceID, Agent: in.AgentName, Status: in.Status, Message: in.Message, OutputSpec: in.OutputSpec})
}

func (cp *ControlPlane) deleteInstance(w http.ResponseWriter, r *http.Request) {
	if err := cp.Delete(r.Context(), r.PathValue("id")); err != nil {
		problem(w, http.StatusNotFound, "not-found", "Instance not found", err.Error())
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// register registers an agent, or updates the one of that name (200, its
// health reset to ready and its heartbeat to now: RegisterOrUpdate in
// internal/agent/service/agent.go). A topic another agent holds is 409
// (ErrAgentConflict); the same name with a new topic moves the topic.
func (cp *ControlPlane) register(w http.ResponseWriter, r *http.Request) {
	var in registration
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		problem(w, http.StatusBadRequest, "validation-error", "Invalid request", "the body is not an agent registration")
		return
	}
	if err := in.validate(); err != nil {
		problem(w, http.StatusBadRequest, "validation-error", "Invalid request", err.Error())
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	now := time.Now().UTC()
	for _, a := range cp.agents {
		if a.TopicName == *in.TopicName && a.Name != *in.Name {
			problem(w, http.StatusConflict, "conflict", "Agent already registered", "the topic is another agent's")
			return
		}
	}
	a, exists := cp.agentNamed(*in.Name)
	status := http.StatusOK
	if !exists {
		a = &Agent{ID: uuid.NewString(), Name: *in.Name, CreateTime: now}
		cp.agents[a.ID] = a
		status = http.StatusCreated
	}
	a.Environment, a.ServiceTypes, a.Cost, a.TopicName = *in.Environment, *in.ServiceTypes, *in.Cost, *in.TopicName
	a.HealthStatus, a.LastHeartbeat, a.UpdateTime = HealthReady, now, now
	cp.registrations = append(cp.registrations, *a)
	writeJSON(w, status, a)
}

func (in registration) validate() error {
	switch {
	case in.Name == nil || *in.Name == "":
		return errors.New("name is required")
	case in.Environment == nil:
		return errors.New("environment is required")
	case in.TopicName == nil || !topicPattern.MatchString(*in.TopicName) || !strings.HasPrefix(*in.TopicName, "dcm.agent."):
		return errors.New("topic_name must be dcm.agent.NAME")
	case in.ServiceTypes == nil:
		return errors.New("service_types is required")
	case in.Cost == nil || !slices.Contains(costs, *in.Cost):
		return errors.New("cost must be one of " + strings.Join(costs, ", "))
	}
	return nil
}

// agentNamed returns the agent of name; the caller holds cp.mu.
func (cp *ControlPlane) agentNamed(name string) (*Agent, bool) {
	for _, a := range cp.agents {
		if a.Name == name {
			return a, true
		}
	}
	return nil, false
}

func (cp *ControlPlane) listAgents(w http.ResponseWriter, r *http.Request) {
	health := r.URL.Query().Get("health_status")
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := struct {
		Agents []Agent `json:"agents"`
	}{Agents: []Agent{}}
	for _, a := range cp.agents {
		if health == "" || a.HealthStatus == health {
			out.Agents = append(out.Agents, *a)
		}
	}
	slices.SortFunc(out.Agents, func(a, b Agent) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

func (cp *ControlPlane) getAgent(w http.ResponseWriter, r *http.Request) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if a, ok := cp.agentOf(w, r); ok {
		writeJSON(w, http.StatusOK, a)
	}
}

// agentOf returns the agent the request's path names, or answers 404; the
// caller holds cp.mu.
func (cp *ControlPlane) agentOf(w http.ResponseWriter, r *http.Request) (*Agent, bool) {
	a, ok := cp.agents[r.PathValue("agentId")]
	if !ok {
		problem(w, http.StatusNotFound, "not-found", "Agent not found", "no agent of this id")
	}
	return a, ok
}

// heartbeat records an agent's heartbeat: a timestamp older than the last
// one is ignored and still answered 200 (UpdateHeartbeatIfNewer); a
// consumer lag at the threshold or above makes the agent congested, below
// it ready (AGENT_CONSUMER_LAG_THRESHOLD, internal/app/config.go).
func (cp *ControlPlane) heartbeat(w http.ResponseWriter, r *http.Request) {
	var in heartbeat
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ConsumerLag == nil || in.Timestamp == nil {
		problem(w, http.StatusBadRequest, "validation-error", "Invalid request", "consumer_lag and timestamp are required")
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	a, ok := cp.agentOf(w, r)
	if !ok {
		return
	}
	cp.heartbeats++
	if in.Timestamp.After(a.LastHeartbeat) {
		a.LastHeartbeat = in.Timestamp.UTC()
		a.HealthStatus = HealthReady
		if *in.ConsumerLag >= cp.opts.LagThreshold {
			a.HealthStatus = HealthCongested
		}
	}
	writeJSON(w, http.StatusOK, a)
}

// problem answers an RFC 7807 problem as the agent API writes it: a bare
// slug as its type (internal/agent/handlers/v1alpha1/errors.go).
func problem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "title": title, "status": status, "detail": detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
