package fleet

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/environments"
)

// Request is a placement question: where can a volume of this size, with
// these modes, in this region and zone (and, if asked, expandable) go?
// Empty fields ask nothing.
type Request struct {
	CapacityBytes          int64
	AccessMode, VolumeMode string
	Region, Zone           string
	Expandable             bool
	// Snapshots asks for classes whose volumes can be snapshotted.
	Snapshots bool
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
	request    Request
	candidates []candidate
	// order ranks the candidates: each a sort key (rankKey) over the
	// candidate's index in its low seqBits, sorted.
	order    []uint64
	excluded []exclusion
}

// exclusion is what a placement left out: an environment's id
// and the reason, or a class's detail and why it refused (its text is
// written straight into the answer).
type exclusion struct {
	env    string
	reason string
	d      *detail
	why    refusal
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

// candidateBuffers and exclusionBuffers recycle the lists placements keep
// (40 bytes a candidate: 400 KB for a whole fleet of 10,000 classes).
var candidateBuffers, exclusionBuffers, orderBuffers sync.Pool

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
	quotaResource              string
	// head opens the candidate's JSON object (its class and where it
	// lives), tail closes it with its "quota" members; class is the
	// opening of an exclusion of the class.
	head, tail, class []byte
	// accessList and volumeList are the class's known modes, for reasons.
	accessList, volumeList string
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
	p.quotaHeadroom, p.quotaLimited, p.quotaResource = headroom.For(d.Name)
	p.accessList, p.volumeList = strings.Join(d.AccessModes, ", "), strings.Join(d.VolumeModes, ", ")
	p.class = fmt.Appendf(nil, `{"environment_id":%s,"storage_class":%s,"reason":`, mustMarshal(d.EnvironmentID), mustMarshal(d.Name))
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
		p.tail = []byte(`,"quota":null,"quota_known":false}`)
	case p.quotaLimited:
		p.tail = fmt.Appendf(nil, `,"quota":{"namespace":%s,"headroom":%q,"headroom_bytes":%d},"quota_known":true}`,
			mustMarshal(headroom.Namespace), quantity(p.quotaHeadroom), p.quotaHeadroom)
	default:
		p.tail = []byte(`,"quota":null,"quota_known":true}`)
	}
	return p
}

// Place answers a placement question from the index alone: every class of
// every READY environment whose classes are current and whose connection
// takes writes (in the region and zone asked) that can take the volume,
// best first. A class is left out when it is known not
// to support a requested mode, does not allow expansion or snapshots when
// that is asked, publishes capacity of which no segment takes the volume (its
// capacity or its largest volume too small), or when the default
// namespace's quota leaves too little room. What is not known — modes,
// snapshots, capacity, quotas the gateway may not read — does not leave a
// class out:
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
	p := &Placement{request: r}
	if b, ok := candidateBuffers.Get().(*[]candidate); ok {
		p.candidates = (*b)[:0]
	}
	if b, ok := orderBuffers.Get().(*[]uint64); ok {
		p.order = (*b)[:0]
	}
	if b, ok := exclusionBuffers.Get().(*[]exclusion); ok && r.Explain {
		p.excluded = (*b)[:0]
	}
	exclude := func(env, format string, args ...any) {
		if r.Explain {
			p.excluded = append(p.excluded, exclusion{env: env, reason: fmt.Sprintf(format, args...)})
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
			exclude(m.ID, "in region %q, not %q", m.Region, r.Region)
			continue
		case r.Zone != "" && m.Zone != r.Zone:
			exclude(m.ID, "in zone %q, not %q", m.Zone, r.Zone)
			continue
		case m.State != string(environments.StateReady):
			exclude(m.ID, "the environment is %s, not READY", cmp.Or(m.State, "PENDING"))
			continue
		case v.stale:
			exclude(m.ID, "its classes are not current: the cluster is not watched now")
			continue
		case !v.writable:
			exclude(m.ID, "its connection does not take writes yet (caches still syncing, or the cluster not READY)")
			continue
		}
		for i := range v.details {
			d := &v.details[i]
			if c, why := d.place(r, access, volume); why == taken {
				p.order = append(p.order, c.rankKey()<<seqBits|uint64(len(p.candidates)))
				p.candidates = append(p.candidates, c)
			} else if r.Explain {
				p.excluded = append(p.excluded, exclusion{d: d, why: why})
			}
		}
	}
	ix.mu.RUnlock()
	// Sorting plain integers, not comparing candidates (BenchmarkPlacement's
	// broad question measures the difference).
	slices.Sort(p.order)
	return p, nil
}

// The rank key's layout, most significant first: 2 bits of what is
// unknown (capability, then capacity), 38 bits of room not left (MiB,
// saturating at 256 PiB), 1 bit for a class that is not the default, then
// seqBits of the candidate's index — its place in the index (environment,
// then class), the last tie-breaker. A fleet has far fewer than 2^23
// (8 million) classes.
const (
	seqBits  = 23
	roomBits = 38
)

// rankKey is c's sort key without its index: smaller ranks first.
func (c candidate) rankKey() uint64 {
	var unknown uint64
	if c.unknownCapability {
		unknown |= 2
	}
	if c.fit == nil {
		unknown |= 1
	}
	const most = 1<<roomBits - 1
	room := min(uint64(max(c.free, 0))>>20, most)
	var notDefault uint64
	if !c.d.isDefault {
		notDefault = 1
	}
	return unknown<<(roomBits+1) | (most-room)<<1 | notDefault
}

// refusal is why a class cannot take a volume; taken says it can.
type refusal uint8

const (
	taken refusal = iota
	accessModeRefused
	volumeModeRefused
	notExpandable
	noSnapshots
	noSegment
	quotaTooSmall
)

// place decides whether d takes the volume: a candidate, or why not (its
// text is built only for a placement that explains).
func (d *detail) place(r Request, access, volume uint8) (candidate, refusal) {
	f := &d.facet
	c := candidate{d: d, free: -1}
	if f.knownAccess && f.access&access != access {
		return c, accessModeRefused
	}
	if f.knownVolume && f.volume&volume != volume {
		return c, volumeModeRefused
	}
	c.unknownCapability = access != 0 && !f.knownAccess || volume != 0 && !f.knownVolume
	if r.Expandable && !f.expandable {
		return c, notExpandable
	}
	switch {
	case r.Snapshots && f.snapshots == capabilities.Unsupported:
		return c, noSnapshots
	case r.Snapshots && f.snapshots == capabilities.Unknown:
		c.unknownCapability = true
	}
	pf := &d.placement
	if len(pf.segments) > 0 {
		for i := range pf.segments {
			if s := &pf.segments[i]; s.takes(r.CapacityBytes) && (c.fit == nil || s.capacityBytes > c.fit.capacityBytes) {
				c.fit = s
			}
		}
		if c.fit == nil {
			return c, noSegment
		}
		c.free = c.fit.capacityBytes
	}
	if pf.quotaLimited {
		if pf.quotaHeadroom < r.CapacityBytes {
			return c, quotaTooSmall
		}
		if c.free < 0 || pf.quotaHeadroom < c.free {
			c.free = pf.quotaHeadroom
		}
	}
	return c, taken
}

// explain appends to b why d refused r. Its text is ASCII from the
// contract's enums and Kubernetes quantities and label selectors.
func (d *detail) explain(b []byte, why refusal, r Request) []byte {
	switch why {
	case accessModeRefused:
		return append(append(append(append(b, "supports "...), d.placement.accessList...), ", not "...), r.AccessMode...)
	case volumeModeRefused:
		return append(append(append(append(b, "supports "...), d.placement.volumeList...), " volumes, not "...), r.VolumeMode...)
	case notExpandable:
		return append(b, "does not allow volume expansion"...)
	case noSnapshots:
		return append(b, "cannot be snapshotted: no VolumeSnapshotClass is for its driver"...)
	case noSegment:
		return append(append(append(append(b, "no published capacity segment takes "...), quantity(r.CapacityBytes)...), ": "...), d.capacitySummary()...)
	case quotaTooSmall:
		return append(append(append(append(b, "the ResourceQuota of its default namespace leaves "...), quantity(d.placement.quotaHeadroom)...), " of "...), d.placement.quotaResource...)
	}
	return b
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
// prepared JSON with what this question found (rank, capability, capacity
// segment), then the exclusions if explained. It hands the placement's
// buffers back for reuse: the placement must not be used afterwards.
func (p *Placement) WriteJSON(w io.Writer, explain bool) error {
	bp, _ := placementWriters.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, writeChunk+4<<10)
		bp = &b
	}
	buf := (*bp)[:0]
	var err error
	// flush writes what is buffered once a chunk is full (or at the end):
	// a placement can be megabytes, sent in 64 KiB writes.
	flush := func(force bool) {
		if err == nil && (force || len(buf) >= writeChunk) {
			_, err = w.Write(buf)
			buf = buf[:0]
		}
	}
	defer func() {
		*bp = buf[:0]
		placementWriters.Put(bp)
		b := p.candidates[:0]
		clear(p.candidates)
		p.candidates = nil
		candidateBuffers.Put(&b)
		o := p.order[:0]
		p.order = nil
		orderBuffers.Put(&o)
		if p.excluded != nil {
			x := p.excluded[:0]
			clear(p.excluded)
			p.excluded = nil
			exclusionBuffers.Put(&x)
		}
	}()
	buf = append(buf, `{"candidates":[`...)
	for i, key := range p.order {
		c := &p.candidates[key&(1<<seqBits-1)]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, c.d.placement.head...)
		buf = strconv.AppendInt(append(buf, `,"rank":`...), int64(i+1), 10)
		buf = strconv.AppendBool(append(buf, `,"capability_known":`...), !c.unknownCapability)
		buf = append(buf, `,"capacity":`...)
		if c.fit != nil {
			buf = append(buf, c.fit.json...)
		} else {
			buf = append(buf, "null"...)
		}
		buf = append(buf, c.d.placement.tail...)
		flush(false)
	}
	buf = append(buf, ']')
	if explain {
		buf = append(buf, `,"excluded":[`...)
		for i, e := range p.excluded {
			if i > 0 {
				buf = append(buf, ',')
			}
			if e.d != nil {
				buf = append(buf, e.d.placement.class...)
				buf = append(append(e.d.explain(append(buf, '"'), e.why, p.request), '"'), '}')
			} else {
				buf = append(appendJSONString(append(buf, `{"environment_id":`...), e.env), `,"reason":`...)
				buf = append(appendJSONString(buf, e.reason), '}')
			}
			flush(false)
		}
		buf = append(buf, ']')
	}
	buf = append(buf, '}')
	flush(true)
	return err
}

// writeChunk is how much WriteJSON buffers before it writes.
const writeChunk = 64 << 10

// placementWriters recycles WriteJSON's buffers.
var placementWriters sync.Pool

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

// appendJSONString appends s as a JSON string: printable ASCII directly
// (reasons are), anything else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return append(b, mustMarshal(s)...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
