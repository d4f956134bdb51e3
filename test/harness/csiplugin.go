package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
)

// TierParameter is the one mutable parameter a plugin driver takes, from a
// VolumeAttributesClass or at creation: the volume's performance tier, one
// of the driver's Tiers.
const TierParameter = "tier"

// plugin is a CSI controller plugin for one Driver with Plugin set, served
// over a unix socket to the Kubernetes CSI project's sidecars
// (external-provisioner, csi-snapshotter, external-resizer). Its volumes and snapshots hold
// no data, only their size: a harness has no nodes to put data on. What it
// refuses, it refuses as a driver does, with the gRPC codes the CSI spec
// gives: an access or volume mode it lacks or a tier it does not offer
// (InvalidArgument), a source that does not exist (NotFound), a name
// reused with another size or source (AlreadyExists).
type plugin struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer

	driver Driver

	mu        sync.Mutex
	volumes   map[string]*pluginVolume   // by id, which is the name the sidecar chose
	snapshots map[string]*pluginSnapshot // by id, likewise
}

type pluginVolume struct {
	size   int64
	source *csi.VolumeContentSource
}

type pluginSnapshot struct {
	source  string
	size    int64
	created *timestamppb.Timestamp
}

// newPluginServer is d's plugin, to serve on a unix socket at path.
func newPluginServer(ctx context.Context, d Driver, path string) (*grpc.Server, net.Listener, error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, nil, fmt.Errorf("plugin %s: %w", d.Name, err)
	}
	p := &plugin{driver: d, volumes: map[string]*pluginVolume{}, snapshots: map[string]*pluginSnapshot{}}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, p)
	csi.RegisterControllerServer(srv, p)
	return srv, lis, nil
}

func (p *plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: p.driver.Name, VendorVersion: "harness"}, nil
}

func (p *plugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (p *plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (p *plugin) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		// ReadWriteOncePod needs the single-node access modes.
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (p *plugin) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := p.supports(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if err := p.checkTier(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = 1 << 30
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	src := req.GetVolumeContentSource()
	from, err := p.sourceSize(src)
	if err != nil {
		return nil, err
	}
	if size < from {
		return nil, status.Errorf(codes.OutOfRange, "%d bytes cannot hold the %d of the source %s", size, from, src)
	}
	if v, ok := p.volumes[req.GetName()]; ok {
		if v.size != size || v.source.String() != src.String() {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with another size or source", req.GetName())
		}
	} else {
		p.volumes[req.GetName()] = &pluginVolume{size: size, source: src}
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), CapacityBytes: size, ContentSource: src}}, nil
}

func (p *plugin) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.volumes, req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

func (p *plugin) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	p.mu.Lock()
	_, err := p.volume(req.GetVolumeId())
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := p.supports(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: req.GetVolumeCapabilities()}}, nil
}

func (p *plugin) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" || req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "name and source_volume_id are required")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volume(req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	s, ok := p.snapshots[req.GetName()]
	switch {
	case !ok:
		s = &pluginSnapshot{source: req.GetSourceVolumeId(), size: v.size, created: timestamppb.Now()}
		p.snapshots[req.GetName()] = s
	case s.source != req.GetSourceVolumeId():
		return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists of another volume", req.GetName())
	}
	return &csi.CreateSnapshotResponse{Snapshot: s.csi(req.GetName())}, nil
}

func (s *pluginSnapshot) csi(id string) *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: id, SourceVolumeId: s.source, SizeBytes: s.size, CreationTime: s.created, ReadyToUse: true}
}

func (p *plugin) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.snapshots, req.GetSnapshotId())
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots answers the csi-snapshotter's questions about one snapshot
// or one volume's snapshots (it asks no wider), in pages of max_entries.
func (p *plugin) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, s := range p.snapshots {
		if (req.GetSnapshotId() == "" || id == req.GetSnapshotId()) && (req.GetSourceVolumeId() == "" || s.source == req.GetSourceVolumeId()) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	start := 0
	if t := req.GetStartingToken(); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(ids) {
			return nil, status.Errorf(codes.Aborted, "starting_token %q is not one this plugin gave", t)
		}
		start = n
	}
	end, next := len(ids), ""
	if m := int(req.GetMaxEntries()); m > 0 && start+m < end {
		end, next = start+m, strconv.Itoa(start+m)
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, id := range ids[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: p.snapshots[id].csi(id)})
	}
	return resp, nil
}

func (p *plugin) ControllerModifyVolume(_ context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	if err := p.checkTier(req.GetMutableParameters()); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.volume(req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// ControllerExpandVolume grows a volume; a data-less one needs nothing on a
// node.
func (p *plugin) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v.size = max(v.size, req.GetCapacityRange().GetRequiredBytes())
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.size}, nil
}

// volume is volume id, or the NotFound a driver answers; p.mu is held.
func (p *plugin) volume(id string) (*pluginVolume, error) {
	v, ok := p.volumes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	return v, nil
}

// sourceSize is the size of what a new volume is made from (0 for
// nothing), or the NotFound a driver answers; p.mu is held.
func (p *plugin) sourceSize(src *csi.VolumeContentSource) (int64, error) {
	switch {
	case src.GetSnapshot() != nil:
		id := src.GetSnapshot().GetSnapshotId()
		if s, ok := p.snapshots[id]; ok {
			return s.size, nil
		}
		return 0, status.Errorf(codes.NotFound, "snapshot %s does not exist", id)
	case src.GetVolume() != nil:
		v, err := p.volume(src.GetVolume().GetVolumeId())
		if err != nil {
			return 0, err
		}
		return v.size, nil
	}
	return 0, nil
}

// checkTier refuses, with the InvalidArgument a driver answers, mutable
// parameters other than a tier the driver offers. (A data-less volume has
// nothing a tier changes: the plugin keeps none.)
func (p *plugin) checkTier(params map[string]string) error {
	for k, v := range params {
		switch {
		case k != TierParameter:
			return status.Errorf(codes.InvalidArgument, "parameter %q is not one %s can change", k, p.driver.Name)
		case !slices.Contains(p.driver.Tiers, v):
			return status.Errorf(codes.InvalidArgument, "tier %q is not one of %s's tiers %v", v, p.driver.Name, p.driver.Tiers)
		}
	}
	return nil
}

// supports refuses, with InvalidArgument, a capability whose access or
// volume mode the driver lacks.
func (p *plugin) supports(caps []*csi.VolumeCapability) error {
	var errs []error
	for _, c := range caps {
		mode, ok := accessModes[c.GetAccessMode().GetMode()]
		if !ok || !p.driver.supportsAccessMode(mode) {
			errs = append(errs, fmt.Errorf("access mode %s", c.GetAccessMode().GetMode()))
		}
		volumeMode := corev1.PersistentVolumeFilesystem
		if c.GetBlock() != nil {
			volumeMode = corev1.PersistentVolumeBlock
		}
		if !p.driver.supportsVolumeMode(volumeMode) {
			errs = append(errs, fmt.Errorf("volume mode %s", volumeMode))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return status.Errorf(codes.InvalidArgument, "%s does not support %v", p.driver.Name, err)
	}
	return nil
}

// accessModes maps CSI's access modes to the Kubernetes ones the
// external-provisioner translates them from.
var accessModes = map[csi.VolumeCapability_AccessMode_Mode]corev1.PersistentVolumeAccessMode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        corev1.ReadWriteOnce,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  corev1.ReadWriteOnce,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: corev1.ReadWriteOncePod,
	csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    corev1.ReadOnlyMany,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:   corev1.ReadWriteMany,
}
