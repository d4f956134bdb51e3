package fleet

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/clusters"
)

// Request is a placement question: where can a volume of this size, with
// these modes, in this region and zone (and, if asked, expandable) go?
// Empty fields ask nothing.
type Request struct {
	CapacityBytes          int64
	AccessMode, VolumeMode string
	Region, Zone           string
	Expandable             bool
	// Explain asks for the reason each environment or class was left out.
	Explain bool
	// Environments, when not nil, are the only environments considered
	// (the caller's scope); the others are not mentioned.
	Environments []string
}

func (r Request) validate() error {
	return Filter{AccessMode: r.AccessMode, VolumeMode: r.VolumeMode}.validate()
}

// Placement is the answer: the candidates, best first, and (when asked)
// what was left out and why.
type Placement struct {
	candidates []candidate
	Excluded   []Exclusion
}

// Exclusion is an environment (StorageClass empty) or one of its classes
// left out of a placement, and why.
type Exclusion struct {
	EnvironmentID string `json:"environment_id"`
	StorageClass  string `json:"storage_class,omitempty"`
	Reason        string `json:"reason"`
}

// candidate is one class of one environment that can take the volume.
type candidate struct {
	d *detail
	// unknownCapability: a requested mode is not known to be supported;
	// fit is the published segment the volume fits best in (nil: none
	// published); free is what it leaves room for, with the quota.
	unknownCapability bool
	fit               *segmentFit
	free              int64
}

// placementFacts are what a placement reads of one class of one
// environment, prepared with its view: the segments its capacity is
// published in, and the JSON of the parts of a candidate that do not
// depend on the question.
type placementFacts struct {
	segments []segmentFit
	// quotaLimited and quotaHeadroom: the default namespace's quotas let
	// claims of this class request quotaHeadroom more (unlimited when not
	// quotaLimited); quotaUnknown when the quotas may not be read.
	quotaLimited, quotaUnknown bool
	quotaHeadroom              int64
	// head opens the candidate's JSON object (its class and where it
	// lives), quota is its "quota" member.
	head, quota []byte
}

// segmentFit is one published capacity segment of a class.
type segmentFit struct {
	capacityBytes int64
	// maxVolumeBytes is the largest volume it takes; 0 when not published.
	maxVolumeBytes int64
	json           []byte
}

// takes reports whether a volume of n bytes fits in the segment.
func (s *segmentFit) takes(n int64) bool {
	return s.capacityBytes >= n && (s.maxVolumeBytes == 0 || s.maxVolumeBytes >= n)
}

// newPlacementFacts prepares d's placement facts; headroom is its
// environment's quota headroom.
func newPlacementFacts(d *Detail, headroom capabilities.Headroom) placementFacts {
	p := placementFacts{quotaUnknown: headroom.Denied}
	if d.Capacity != nil {
		for _, s := range d.Capacity.Segments {
			fit := segmentFit{capacityBytes: s.CapacityBytes}
			if q, err := resource.ParseQuantity(s.MaximumVolumeSize); err == nil && s.MaximumVolumeSize != "" {
				fit.maxVolumeBytes = q.Value()
			}
			fit.json = mustMarshal(s)
			p.segments = append(p.segments, fit)
		}
	}
	p.quotaHeadroom, p.quotaLimited = headroom.For(d.Name)
	head := struct {
		EnvironmentID        string   `json:"environment_id"`
		Region               string   `json:"region"`
		Zone                 string   `json:"zone"`
		StorageClass         string   `json:"storage_class"`
		Provisioner          string   `json:"provisioner"`
		IsDefault            bool     `json:"is_default"`
		VolumeBindingMode    string   `json:"volume_binding_mode"`
		AllowVolumeExpansion bool     `json:"allow_volume_expansion"`
		AccessModes          []string `json:"access_modes,omitempty"`
		VolumeModes          []string `json:"volume_modes,omitempty"`
	}{d.EnvironmentID, d.Region, d.Zone, d.Name, d.Provisioner, d.IsDefault, d.VolumeBindingMode,
		d.AllowVolumeExpansion, d.AccessModes, d.VolumeModes}
	raw := mustMarshal(head)
	p.head = raw[:len(raw)-1]
	switch {
	case p.quotaUnknown:
		p.quota = []byte(`,"quota":null,"quota_known":false`)
	case p.quotaLimited:
		p.quota = fmt.Appendf(nil, `,"quota":{"namespace":%s,"headroom":%q,"headroom_bytes":%d},"quota_known":true`,
			mustMarshal(headroom.Namespace), quantity(p.quotaHeadroom), p.quotaHeadroom)
	default:
		p.quota = []byte(`,"quota":null,"quota_known":true`)
	}
	return p
}

// Place answers a placement question from the index alone: every class of
// every READY, live environment (in the region and zone asked) that can
// take the volume, best first. A class is left out when it is known not
// to support a requested mode, does not allow expansion when that is
// asked, publishes capacity of which no segment takes the volume (its
// capacity or its largest volume too small), or when the default
// namespace's quota leaves too little room. What is not known — modes,
// capacity, quotas the gateway may not read — does not leave a class out:
// it is flagged, and ranked after what is known. The ranking: known
// capability first, then published capacity, then the most room (the
// smaller of the best segment's capacity and the quota's headroom), then
// the environment's default class, then environment and class name.
func (ix *Index) Place(r Request) (*Placement, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	access := modeBits(capabilities.AllAccessModes, []string{r.AccessMode})
	volume := modeBits(capabilities.AllVolumeModes, []string{r.VolumeMode})
	p := &Placement{}
	exclude := func(env, class, format string, args ...any) {
		if r.Explain {
			p.Excluded = append(p.Excluded, Exclusion{EnvironmentID: env, StorageClass: class, Reason: fmt.Sprintf(format, args...)})
		}
	}
	ix.mu.RLock()
	for _, e := range ix.order {
		v := e.view
		m := v.meta
		switch {
		case r.Environments != nil && !slices.Contains(r.Environments, m.ID):
			continue
		case r.Region != "" && m.Region != r.Region:
			exclude(m.ID, "", "in region %q, not %q", m.Region, r.Region)
			continue
		case r.Zone != "" && m.Zone != r.Zone:
			exclude(m.ID, "", "in zone %q, not %q", m.Zone, r.Zone)
			continue
		case m.State != string(clusters.StateReady):
			exclude(m.ID, "", "the environment is %s, not READY", cmp.Or(m.State, "PENDING"))
			continue
		case v.stale:
			exclude(m.ID, "", "its classes are not current: the cluster is not watched now")
			continue
		}
		for i := range v.details {
			d := &v.details[i]
			if c, why := d.place(r, access, volume); why == "" {
				p.candidates = append(p.candidates, c)
			} else {
				exclude(m.ID, d.Name, "%s", why)
			}
		}
	}
	ix.mu.RUnlock()
	slices.SortStableFunc(p.candidates, func(a, b candidate) int {
		if c := compareFalseFirst(a.unknownCapability, b.unknownCapability); c != 0 {
			return c
		}
		if c := compareFalseFirst(a.fit == nil, b.fit == nil); c != 0 {
			return c
		}
		if c := cmp.Compare(b.free, a.free); c != 0 {
			return c
		}
		return compareFalseFirst(!a.d.isDefault, !b.d.isDefault) // then index order: environment, class
	})
	return p, nil
}

// compareFalseFirst orders false before true.
func compareFalseFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// place decides whether d takes the volume: a candidate, or why not.
func (d *detail) place(r Request, access, volume uint8) (candidate, string) {
	f := &d.facet
	c := candidate{d: d, free: -1}
	if f.knownAccess && f.access&access != access {
		return c, fmt.Sprintf("supports %s, not %s", strings.Join(d.AccessModes, ", "), r.AccessMode)
	}
	if f.knownVolume && f.volume&volume != volume {
		return c, fmt.Sprintf("supports %s volumes, not %s", strings.Join(d.VolumeModes, ", "), r.VolumeMode)
	}
	c.unknownCapability = access != 0 && !f.knownAccess || volume != 0 && !f.knownVolume
	if r.Expandable && !f.expandable {
		return c, "does not allow volume expansion"
	}
	pf := &d.placement
	if len(pf.segments) > 0 {
		for i := range pf.segments {
			if s := &pf.segments[i]; s.takes(r.CapacityBytes) && (c.fit == nil || s.capacityBytes > c.fit.capacityBytes) {
				c.fit = s
			}
		}
		if c.fit == nil {
			return c, "no published capacity segment takes " + quantity(r.CapacityBytes) + ": " + d.capacitySummary()
		}
		c.free = c.fit.capacityBytes
	}
	if pf.quotaLimited {
		if pf.quotaHeadroom < r.CapacityBytes {
			return c, fmt.Sprintf("the ResourceQuota of its default namespace leaves %s of requests.storage", quantity(pf.quotaHeadroom))
		}
		if c.free < 0 || pf.quotaHeadroom < c.free {
			c.free = pf.quotaHeadroom
		}
	}
	return c, ""
}

// capacitySummary lists a class's published segments for an explanation.
func (d *detail) capacitySummary() string {
	parts := make([]string, len(d.Capacity.Segments))
	for i, s := range d.Capacity.Segments {
		parts[i] = s.Capacity
		if s.MaximumVolumeSize != "" {
			parts[i] += " (volumes up to " + s.MaximumVolumeSize + ")"
		}
		if s.Topology != "" {
			parts[i] += " on " + s.Topology
		}
	}
	return strings.Join(parts, "; ")
}

// WriteJSON writes the placement as the API's Placement: each candidate's
// prepared JSON with what this question found (capability, capacity
// segment, rank), then the exclusions if explained.
func (p *Placement) WriteJSON(w io.Writer, explain bool) error {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		writers.Put(bw)
	}()
	buf := make([]byte, 0, 512)
	buf = append(buf, `{"candidates":[`...)
	for i, c := range p.candidates {
		if i > 0 {
			buf = append(buf, ',')
		}
		pf := &c.d.placement
		buf = append(buf, pf.head...)
		buf = append(buf, `,"rank":`...)
		buf = strconv.AppendInt(buf, int64(i+1), 10)
		buf = append(buf, `,"capability_known":`...)
		buf = strconv.AppendBool(buf, !c.unknownCapability)
		buf = append(buf, `,"capacity":`...)
		if c.fit != nil {
			buf = append(buf, c.fit.json...)
		} else {
			buf = append(buf, "null"...)
		}
		buf = append(buf, pf.quota...)
		buf = append(buf, '}')
		if len(buf) > 32<<10 {
			_, _ = bw.Write(buf) // bufio keeps the first error for Flush
			buf = buf[:0]
		}
	}
	buf = append(buf, ']')
	if explain {
		excluded := p.Excluded
		if excluded == nil {
			excluded = []Exclusion{}
		}
		buf = append(buf, `,"excluded":`...)
		buf = append(buf, mustMarshal(excluded)...)
	}
	buf = append(buf, '}')
	_, _ = bw.Write(buf)
	return bw.Flush()
}

// Candidates counts the candidates (for logs and tests).
func (p *Placement) Candidates() int { return len(p.candidates) }

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

// mustMarshal encodes values that always encode (strings, numbers, bools
// and slices of them).
func mustMarshal(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fleet: encode %T: %v", v, err))
	}
	return raw
}
