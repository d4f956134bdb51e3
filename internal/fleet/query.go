package fleet

import (
	"bufio"
	"encoding/json"
	"io"
	"slices"
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

func (f Filter) class(c *capabilities.Class) bool {
	return (f.Provisioner == "" || f.Provisioner == c.Provisioner) &&
		(f.AccessMode == "" || slices.Contains(c.AccessModes, f.AccessMode)) &&
		(f.VolumeMode == "" || slices.Contains(c.VolumeModes, f.VolumeMode)) &&
		(f.Expandable == nil || *f.Expandable == c.AllowVolumeExpansion) &&
		(f.IsDefault == nil || *f.IsDefault == c.IsDefault)
}

// Summary sums up one class name across the environments a query shows.
type Summary struct {
	EnvironmentCount      int `json:"environment_count"`
	StaleEnvironmentCount int `json:"stale_environment_count"`
	DefaultCount          int `json:"default_environment_count"`
	// UnknownCapabilityCount counts environments where the class's access or
	// volume modes are unknown (the unions below leave them out).
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
}

// ClassEntry is one class name across the fleet.
type ClassEntry struct {
	Name    string
	Summary Summary
	details []*detail
}

// Details returns the entry's per-environment details, in environment order.
func (c ClassEntry) Details() []Detail {
	out := make([]Detail, len(c.details))
	for i, d := range c.details {
		out[i] = d.Detail
	}
	return out
}

// Classes answers a fleet query: class names in order, maxPageSize names a
// page (paging.Size), each with the matching environments' details and a
// summary of them.
func (ix *Index) Classes(f Filter, maxPageSize int, pageToken string) (ClassPage, error) {
	if err := f.validate(); err != nil {
		return ClassPage{}, err
	}
	size, err := paging.Size(maxPageSize)
	if err != nil {
		return ClassPage{}, err
	}
	after, err := paging.After(pageToken, f)
	if err != nil {
		return ClassPage{}, err
	}
	byName := map[string][]*detail{}
	ix.mu.RLock()
	for _, id := range ix.ids {
		v := ix.envs[id].view
		if !f.environment(v.meta) {
			continue
		}
		for _, d := range v.details {
			if d.Name > after && f.class(&d.Class) {
				byName[d.Name] = append(byName[d.Name], d)
			}
		}
	}
	ix.mu.RUnlock()

	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	var page ClassPage
	if len(names) > size {
		names = names[:size]
		page.NextPageToken = paging.Token(names[size-1], f)
	}
	page.Classes = make([]ClassEntry, len(names))
	for i, name := range names {
		page.Classes[i] = ClassEntry{Name: name, Summary: summarize(byName[name]), details: byName[name]}
	}
	return page, nil
}

func summarize(details []*detail) Summary {
	s := Summary{EnvironmentCount: len(details), Provisioners: []string{}}
	access, volume := map[string]bool{}, map[string]bool{}
	expandable := 0
	var total resource.Quantity
	published := false
	for _, d := range details {
		if d.Stale {
			s.StaleEnvironmentCount++
		}
		if d.IsDefault {
			s.DefaultCount++
		}
		if d.AllowVolumeExpansion {
			expandable++
		}
		if d.AccessModes == nil || d.VolumeModes == nil {
			s.UnknownCapabilityCount++
		}
		if !slices.Contains(s.Provisioners, d.Provisioner) {
			s.Provisioners = append(s.Provisioners, d.Provisioner)
		}
		for _, m := range d.AccessModes {
			access[m] = true
		}
		for _, m := range d.VolumeModes {
			volume[m] = true
		}
		if d.Capacity != nil {
			total.Add(*resource.NewQuantity(d.Capacity.TotalBytes, resource.BinarySI))
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
	s.AccessModes = inOrder(capabilities.AllAccessModes, access)
	s.VolumeModes = inOrder(capabilities.AllVolumeModes, volume)
	if published {
		s.Capacity = &Total{Total: total.String(), TotalBytes: total.Value()}
	}
	return s
}

func inOrder(all []string, set map[string]bool) []string {
	out := []string{}
	for _, m := range all {
		if set[m] {
			out = append(out, m)
		}
	}
	return out
}

// WriteJSON writes the page as the API's StorageClassList, copying each
// detail's pre-encoded JSON.
func (p ClassPage) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`{"storage_classes":[`)
	for i, c := range p.Classes {
		if i > 0 {
			bw.WriteByte(',')
		}
		head, _ := json.Marshal(struct { // strings, ints and string slices always encode
			Name    string  `json:"name"`
			Summary Summary `json:"summary"`
		}{c.Name, c.Summary})
		bw.Write(head[:len(head)-1])
		bw.WriteString(`,"environments":[`)
		for j, d := range c.details {
			if j > 0 {
				bw.WriteByte(',')
			}
			bw.Write(d.json)
		}
		bw.WriteString(`]}`)
	}
	bw.WriteByte(']')
	if p.NextPageToken != "" {
		tok, _ := json.Marshal(p.NextPageToken)
		bw.WriteString(`,"next_page_token":`)
		bw.Write(tok)
	}
	bw.WriteByte('}')
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
	for i, d := range v.details {
		out.Classes[i] = d.Detail
	}
	return out, true
}
