package fleet

import (
	"bufio"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dcm-project/storage-gateway/internal/capabilities"
	"github.com/dcm-project/storage-gateway/internal/fault"
	"github.com/dcm-project/storage-gateway/internal/paging"
)

// Filter narrows a fleet query; zero fields match everything. A mode filter
// matches only classes known to support the mode: "unknown" is not a yes.
type Filter struct {
	Environments []string `json:"e,omitempty"`
	Region       string   `json:"r,omitempty"`
	Provisioner  string   `json:"p,omitempty"`
	AccessMode   string   `json:"a,omitempty"`
	VolumeMode   string   `json:"v,omitempty"`
	Expandable   *bool    `json:"x,omitempty"`
	IsDefault    *bool    `json:"d,omitempty"`
	// Snapshots true asks for classes known to be snapshottable, false for
	// those known not to be; Tier for those whose driver has the tier.
	Snapshots *bool  `json:"s,omitempty"`
	Tier      string `json:"t,omitempty"`
}

func (f Filter) validate() error {
	if f.AccessMode != "" && !slices.Contains(capabilities.AllAccessModes, f.AccessMode) {
		return fault.Invalid("access_mode", "must be one of %v", capabilities.AllAccessModes)
	}
	if f.VolumeMode != "" && !slices.Contains(capabilities.AllVolumeModes, f.VolumeMode) {
		return fault.Invalid("volume_mode", "must be one of %v", capabilities.AllVolumeModes)
	}
	return nil
}

func (f Filter) environment(m Meta) bool {
	return (len(f.Environments) == 0 || slices.Contains(f.Environments, m.ID)) && (f.Region == "" || f.Region == m.Region)
}

// facetFilter is a Filter's class terms in the form facets are kept.
type facetFilter struct {
	provisioner, tier            string
	access, volume               uint8 // 0: any
	expandable, isDef, snapshots *bool
}

func (f Filter) facets() facetFilter {
	return facetFilter{provisioner: f.Provisioner, tier: f.Tier, expandable: f.Expandable, isDef: f.IsDefault, snapshots: f.Snapshots,
		access: modeBits(capabilities.AllAccessModes, []string{f.AccessMode}),
		volume: modeBits(capabilities.AllVolumeModes, []string{f.VolumeMode})}
}

func (f facetFilter) match(c *facet) bool {
	return (f.provisioner == "" || f.provisioner == c.provisioner) &&
		c.access&f.access == f.access && c.volume&f.volume == f.volume &&
		(f.expandable == nil || *f.expandable == c.expandable) &&
		(f.isDef == nil || *f.isDef == c.isDefault) &&
		(f.snapshots == nil || c.snapshots == snapshotAnswer(*f.snapshots)) &&
		(f.tier == "" || slices.Contains(c.tiers, f.tier))
}

// snapshotAnswer is the Support a snapshots filter asks for: unknown
// matches neither true nor false.
func snapshotAnswer(want bool) capabilities.Support {
	if want {
		return capabilities.Supported
	}
	return capabilities.Unsupported
}

// Summary sums up one class name across the environments a query shows.
type Summary struct {
	EnvironmentCount      int `json:"environment_count"`
	StaleEnvironmentCount int `json:"stale_environment_count"`
	DefaultCount          int `json:"default_environment_count"`
	// UnknownCapabilityCount counts environments where the class's access or
	// volume modes are unknown; the unions below hold known modes only.
	UnknownCapabilityCount int      `json:"unknown_capability_count"`
	Provisioners           []string `json:"provisioners"`
	// Expandable is everywhere, somewhere or nowhere.
	Expandable  string   `json:"expandable"`
	AccessModes []string `json:"access_modes"`
	VolumeModes []string `json:"volume_modes"`
	// Capacity sums the published capacity of the environments that publish
	// one; absent when none does.
	Capacity *Total `json:"capacity,omitempty"`
}

// Total is a capacity sum.
type Total struct {
	Total      string `json:"total"`
	TotalBytes int64  `json:"total_bytes"`
}

// ClassPage is one page of a fleet query: class names in order, each with
// the environments that offer it.
type ClassPage struct {
	Classes       []ClassEntry
	NextPageToken string
	// grouped backs every entry's details; Release recycles it.
	grouped []*detail
}

// groupBuffers recycles the buffers fleet-wide answers group their details
// in (8 bytes per detail: 80 KB at 10,000), so a busy dashboard does not
// keep the garbage collector running.
var groupBuffers sync.Pool

// Release hands the page's buffers back for reuse; the page must not be
// used afterwards. Not calling it is safe (the garbage collector takes
// them).
func (p *ClassPage) Release() {
	if p.grouped != nil {
		recycle(p.grouped)
		p.grouped, p.Classes = nil, nil
	}
}

// ClassEntry is one class name across the fleet.
type ClassEntry struct {
	Name    string
	Summary Summary
	details []*detail
}

// Classes answers a fleet query: class names in order, maxPageSize names a
// page (paging.Size), each with the matching environments' details and a
// summary of them.
func (ix *Index) Classes(f Filter, maxPageSize int, pageToken string) (*ClassPage, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	size, err := paging.Size(maxPageSize)
	if err != nil {
		return nil, err
	}
	after, err := paging.After(pageToken, f)
	if err != nil {
		return nil, err
	}
	match := f.facets()
	ix.mu.RLock()
	// One pass collects the matching details in environment order and
	// counts them per class name; a counting sort then groups them by name,
	// keeping environment order within a name (no hashing, and both buffers
	// are recycled).
	counts := make([]int, len(ix.nameList))
	scratch := groupBuffer(0)
	for _, e := range ix.order {
		v := e.view
		if !f.environment(v.meta) {
			continue
		}
		for i := range v.details {
			if d := &v.details[i]; d.name > after && match.match(&d.facet) {
				scratch = append(scratch, d)
				counts[d.nameID]++
			}
		}
	}
	nameList := ix.nameList
	ix.mu.RUnlock()

	var ids []int
	starts := make([]int, len(counts))
	total := 0
	for id, n := range counts {
		if n > 0 {
			ids = append(ids, id)
			starts[id] = total
			total += n
		}
	}
	grouped := groupBuffer(total)
	fill := slices.Clone(starts)
	for _, d := range scratch {
		grouped[fill[d.nameID]] = d
		fill[d.nameID]++
	}
	recycle(scratch)
	slices.SortFunc(ids, func(a, b int) int { return strings.Compare(nameList[a], nameList[b]) })
	page := &ClassPage{grouped: grouped}
	if len(ids) > size {
		ids = ids[:size]
		page.NextPageToken = paging.Token(nameList[ids[size-1]], f)
	}
	page.Classes = make([]ClassEntry, len(ids))
	for i, id := range ids {
		details := grouped[starts[id] : starts[id]+counts[id]]
		page.Classes[i] = ClassEntry{Name: nameList[id], Summary: summarize(details), details: details}
	}
	return page, nil
}

// groupBuffer returns a slice of n nil pointers, recycled if one is free.
func groupBuffer(n int) []*detail {
	if b, ok := groupBuffers.Get().(*[]*detail); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]*detail, n, max(n, 64))
}

// recycle hands a buffer from groupBuffer back.
func recycle(b []*detail) {
	clear(b)
	b = b[:0]
	groupBuffers.Put(&b)
}

func summarize(details []*detail) Summary {
	s := Summary{EnvironmentCount: len(details), Provisioners: []string{}}
	var access, volume uint8
	var expandable int
	var capacity int64
	published := false
	for _, d := range details {
		f := &d.facet
		if f.stale {
			s.StaleEnvironmentCount++
		}
		if f.isDefault {
			s.DefaultCount++
		}
		if f.expandable {
			expandable++
		}
		if !f.knownAccess || !f.knownVolume {
			s.UnknownCapabilityCount++
		}
		if !slices.Contains(s.Provisioners, f.provisioner) {
			s.Provisioners = append(s.Provisioners, f.provisioner)
		}
		access |= f.access
		volume |= f.volume
		if f.hasCapacity {
			capacity += f.capacityBytes
			published = true
		}
	}
	slices.Sort(s.Provisioners)
	switch expandable {
	case len(details):
		s.Expandable = "everywhere"
	case 0:
		s.Expandable = "nowhere"
	default:
		s.Expandable = "somewhere"
	}
	s.AccessModes = fromBits(capabilities.AllAccessModes, access)
	s.VolumeModes = fromBits(capabilities.AllVolumeModes, volume)
	if published {
		total := resource.NewQuantity(capacity, resource.BinarySI)
		s.Capacity = &Total{Total: total.String(), TotalBytes: capacity}
	}
	return s
}

// fromBits lists the modes of all whose bit is set, in all's order.
func fromBits(all []string, bits uint8) []string {
	out := []string{}
	for i, m := range all {
		if bits&(1<<i) != 0 {
			out = append(out, m)
		}
	}
	return out
}

// writers are WriteJSON's output buffers: a fleet answer can be megabytes,
// sent in 64 KiB writes rather than one per detail.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

var comma = []byte(",")

// WriteJSON writes the page as the API's StorageClassList, copying each
// detail's pre-encoded JSON.
func (p *ClassPage) WriteJSON(w io.Writer) error {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		writers.Put(bw)
	}()
	// A bufio.Writer keeps its first error and skips later writes; Flush
	// returns it, so the writes below need no checks of their own.
	put := func(b []byte) { _, _ = bw.Write(b) }
	put([]byte(`{"storage_classes":[`))
	for i, c := range p.Classes {
		if i > 0 {
			put(comma)
		}
		head, _ := json.Marshal(struct { // strings, ints and string slices always encode
			Name    string  `json:"name"`
			Summary Summary `json:"summary"`
		}{c.Name, c.Summary})
		put(head[:len(head)-1])
		put([]byte(`,"environments":[`))
		for j, d := range c.details {
			if j > 0 {
				put(comma)
			}
			put(d.json)
		}
		put([]byte(`]}`))
	}
	put([]byte(`]`))
	if p.NextPageToken != "" {
		tok, _ := json.Marshal(p.NextPageToken)
		put([]byte(`,"next_page_token":`))
		put(tok)
	}
	put([]byte(`}`))
	return bw.Flush()
}

// EnvironmentClasses are one environment's classes.
type EnvironmentClasses struct {
	EnvironmentID string    `json:"environment_id"`
	Stale         bool      `json:"stale"`
	ObservedTime  time.Time `json:"observed_time,omitzero"`
	Classes       []Detail  `json:"storage_classes"`
}

// Environment returns one environment's classes; false when the index does
// not hold the environment.
func (ix *Index) Environment(id string) (EnvironmentClasses, bool) {
	ix.mu.RLock()
	e, ok := ix.envs[id]
	var v *envView
	if ok {
		v = e.view
	}
	ix.mu.RUnlock()
	if !ok {
		return EnvironmentClasses{}, false
	}
	out := EnvironmentClasses{EnvironmentID: id, Stale: v.stale, ObservedTime: v.observed, Classes: make([]Detail, len(v.details))}
	for i := range v.details {
		out.Classes[i] = v.details[i].Detail
	}
	return out, true
}
