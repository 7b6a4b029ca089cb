package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const defaultCapacity = 1 << 30 // a claim always asks for a size; csi-sanity sometimes does not

// store is the state all the sockets share: the volumes, and the lock every call takes.
type store struct {
	mu  sync.Mutex
	dir string // ID (the volume's directory) and ID.json (its volume) for each volume
}

// volume is what ID.json records. The two capacities differ between ControllerExpandVolume and
// NodeExpandVolume, as a disk's and its filesystem's would: the stats show the second.
type volume struct {
	Name         string `json:"name"`
	Capacity     int64  `json:"capacity"`     // granted by the controller
	NodeCapacity int64  `json:"nodeCapacity"` // grown by the node
}

// safeID is what a volume id can be: a file name, so that no id reaches outside the state dir.
var safeID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// volumeID derives the id from the name (so CreateVolume is idempotent without an index): the
// name itself when it is a safe one (a PV's pvc-UID is, and readable in ls), else its hash.
func volumeID(name string) string {
	if safeID.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256-" + hex.EncodeToString(sum[:16])
}

func (st *store) path(id string) string { return filepath.Join(st.dir, id) }

func (st *store) load(id string) (*volume, error) {
	if !safeID.MatchString(id) {
		return nil, status.Errorf(codes.NotFound, "no volume %q", id)
	}
	b, err := os.ReadFile(st.path(id) + ".json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "no volume %q", id)
	} else if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var v volume
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, status.Errorf(codes.Internal, "%s.json: %v", id, err)
	}
	return &v, nil
}

// save replaces ID.json whole (a rename), so a crash never leaves half a record.
func (st *store) save(id string, v *volume) error {
	b, _ := json.Marshal(v)
	tmp := st.path(id) + ".json.tmp"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := os.Rename(tmp, st.path(id)+".json"); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// plugin serves the CSI services on one socket; node is the node id its NodeGetInfo answers.
type plugin struct {
	*store
	node string
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
}

// Identity

func (p *plugin) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: driverVersion}, nil
}

func (p *plugin) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}},
		// Online: the resizer and the kubelet grow a volume while a pod uses it.
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil
}

func (p *plugin) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// Controller

// checkCapabilities admits directories mounted by one node: a bind mount is no block device.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, c := range caps {
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "only the mount access type (no block volumes)")
		}
		switch c.GetAccessMode().GetMode() {
		case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
		default:
			return status.Errorf(codes.InvalidArgument, "access mode %v is not supported", c.GetAccessMode().GetMode())
		}
	}
	return nil
}

func (p *plugin) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "no name")
	}
	if err := checkCapabilities(req.VolumeCapabilities); err != nil {
		return nil, err
	}
	if req.VolumeContentSource != nil {
		return nil, status.Error(codes.InvalidArgument, "no snapshots or clones")
	}
	r := req.CapacityRange
	want, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if want < 0 || limit < 0 || (limit > 0 && limit < want) {
		return nil, status.Errorf(codes.InvalidArgument, "bad capacity range %v", r)
	}
	if want == 0 {
		want = defaultCapacity
		if limit > 0 && limit < want {
			want = limit
		}
	}
	id := volumeID(req.Name)
	v, err := p.load(id)
	if status.Code(err) == codes.NotFound {
		v = &volume{Name: req.Name, Capacity: want, NodeCapacity: want}
		if err := os.MkdirAll(p.path(id), 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		// Pods of any user write to it, as to local-path's volumes.
		if err := os.Chmod(p.path(id), 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		err = p.save(id, v)
	} else if err == nil && (v.Capacity < r.GetRequiredBytes() || (limit > 0 && v.Capacity > limit)) {
		err = status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes", req.Name, v.Capacity)
	}
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: v.Capacity}}, nil
}

func (p *plugin) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.VolumeId == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	if safeID.MatchString(req.VolumeId) { // any other id names no volume: nothing to delete
		// The directory first: a crash in between leaves a volume that a retry deletes,
		// never a directory with old data that a new volume of the same name would get.
		if err := os.RemoveAll(p.path(req.VolumeId)); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.Remove(p.path(req.VolumeId) + ".json"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (p *plugin) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.VolumeId == "" || req.CapacityRange == nil {
		return nil, status.Error(codes.InvalidArgument, "no volume id or no capacity range")
	}
	v, err := p.load(req.VolumeId)
	if err != nil {
		return nil, err
	}
	if want := req.CapacityRange.RequiredBytes; want > v.Capacity { // never shrinks
		v.Capacity = want
		if err := p.save(req.VolumeId, v); err != nil {
			return nil, err
		}
	}
	// The node grows its "filesystem" in NodeExpandVolume, as the kubelet will ask.
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.Capacity, NodeExpansionRequired: v.NodeCapacity < v.Capacity}, nil
}

func (p *plugin) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.VolumeId == "" || len(req.VolumeCapabilities) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no volume id or no capabilities")
	}
	if _, err := p.load(req.VolumeId); err != nil {
		return nil, err
	}
	if err := checkCapabilities(req.VolumeCapabilities); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.VolumeContext, VolumeCapabilities: req.VolumeCapabilities, Parameters: req.Parameters,
	}}, nil
}

func (p *plugin) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// Node. No STAGE_UNSTAGE: a directory needs no per-node setup, and so the kubelet publishes
// (and expands and measures) the volume at the pod's own target path.

func (p *plugin) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (p *plugin) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: p.node}, nil
}

// publishedAt tells whether path is the volume's directory itself: a bind mount of it shows
// its device and inode, where the empty directory under it has its own.
func (p *plugin) publishedAt(id, path string) bool {
	var a, b unix.Stat_t
	return unix.Stat(path, &a) == nil && unix.Stat(p.path(id), &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// published is the volume that NodeExpandVolume or NodeGetVolumeStats names, checked to be the
// one at their path (so that they never report on a volume the kubelet does not see there).
func (p *plugin) published(id, path string) (*volume, error) {
	if id == "" || path == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id or volume path")
	}
	v, err := p.load(id)
	if err == nil && !p.publishedAt(id, path) {
		err = status.Errorf(codes.NotFound, "volume %q is not published at %s", id, path)
	}
	return v, err
}

func (p *plugin) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.VolumeId == "" || req.TargetPath == "" || req.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "no volume id, target path or volume capability")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.VolumeCapability}); err != nil {
		return nil, err
	}
	if _, err := p.load(req.VolumeId); err != nil {
		return nil, err
	}
	target := req.TargetPath
	if p.publishedAt(req.VolumeId, target) { // a retry
		return &csi.NodePublishVolumeResponse{}, nil
	}
	// The kubelet makes the target's parent; the target itself is the plugin's to make.
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(p.path(req.VolumeId), target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount on %s: %v", target, err)
	}
	// A bind mount takes no flags but MS_BIND: readonly is a remount of it.
	if req.Readonly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "readonly remount of %s: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (p *plugin) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.VolumeId == "" || req.TargetPath == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id or target path")
	}
	// Every mount on the target (EINVAL: none left; ENOENT: no target, already unpublished).
	for {
		err := unix.Unmount(req.TargetPath, 0)
		if err == unix.EINVAL || err == unix.ENOENT {
			break
		} else if err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", req.TargetPath, err)
		}
	}
	// Remove, never RemoveAll: were the volume still mounted there, its data would go too.
	if err := os.Remove(req.TargetPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (p *plugin) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	v, err := p.published(req.VolumeId, req.VolumePath)
	if err != nil {
		return nil, err
	}
	want := req.CapacityRange.GetRequiredBytes()
	if want == 0 {
		want = v.Capacity
	}
	if want > v.Capacity { // a filesystem cannot outgrow its disk
		return nil, status.Errorf(codes.OutOfRange, "%d bytes asked, the controller granted %d", want, v.Capacity)
	}
	if want > v.NodeCapacity {
		v.NodeCapacity = want
		if err := p.save(req.VolumeId, v); err != nil {
			return nil, err
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.NodeCapacity}, nil
}

func (p *plugin) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	v, err := p.published(req.VolumeId, req.VolumePath)
	if err != nil {
		return nil, err
	}
	// Used: the files' sizes (no quota is kept: the data may outgrow the capacity).
	var used int64
	_ = filepath.WalkDir(p.path(req.VolumeId), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				used += fi.Size()
			}
		}
		return nil // a file removed meanwhile is no error: go on
	})
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{
		Unit: csi.VolumeUsage_BYTES, Total: v.NodeCapacity, Used: used, Available: max(v.NodeCapacity-used, 0),
	}}}, nil
}
