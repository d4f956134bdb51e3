package fleet

// InternedNames is how many class names the index holds interned.
func InternedNames(ix *Index) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.nameList)
}

// Exclusion is an environment (StorageClass empty) or one of its classes
// left out of a placement, and why.
type Exclusion struct {
	EnvironmentID string `json:"environment_id"`
	StorageClass  string `json:"storage_class,omitempty"`
	Reason        string `json:"reason"`
}

// Excluded lists what a placement left out and why (when explained), as
// its answer says.
func (p *Placement) Excluded() []Exclusion {
	out := make([]Exclusion, len(p.excluded))
	for i, e := range p.excluded {
		out[i] = Exclusion{EnvironmentID: e.env, Reason: e.reason}
		if e.d != nil {
			out[i] = Exclusion{EnvironmentID: e.d.EnvironmentID, StorageClass: e.d.Name, Reason: string(e.d.explain(nil, e.why, p.request))}
		}
	}
	return out
}

// Candidates counts the candidates.
func (p *Placement) Candidates() int { return len(p.candidates) }
