package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// start serves a state dir and two fake kubelet root dirs, all temporary.
func start(t *testing.T) (config, *running) {
	dir := t.TempDir()
	c := config{state: filepath.Join(dir, "state"), controller: filepath.Join(dir, "csi.sock")}
	// n2's root is laid out as the local cluster's: its registration socket takes the short name.
	c.kubelets = []kubelet{{"n1", filepath.Join(dir, "k1")}, {"n2", filepath.Join(dir, "nodes/eo-node-2/kubelet/root")}}
	r, err := serve(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	return c, r
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRegistration does what a kubelet's plugin watcher does with each registration socket:
// GetInfo, then the node endpoint's NodeGetInfo, then NotifyRegistrationStatus.
func TestRegistration(t *testing.T) {
	c, r := start(t)
	ctx := context.Background()
	for i, k := range c.kubelets {
		sock := filepath.Join(k.root, "plugins_registry", []string{driverName + "-reg.sock", "hostdir-reg.sock"}[i])
		reg := registerapi.NewRegistrationClient(dial(t, sock))
		info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(c.state, "nodes", k.name, "csi.sock")
		if info.Type != "CSIPlugin" || info.Name != driverName || info.Endpoint != want || len(info.SupportedVersions) != 1 || info.SupportedVersions[0] != "1.0.0" {
			t.Fatalf("%s: GetInfo = %v", k.name, info)
		}
		ni, err := csi.NewNodeClient(dial(t, info.Endpoint)).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if err != nil || ni.NodeId != k.name {
			t.Fatalf("%s: NodeGetInfo = %v, %v", k.name, ni, err)
		}
		if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v", k.name, info)
	}
	// Stopped, it leaves no socket for a kubelet to dial.
	r.stop()
	for _, p := range r.sockets {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after stop (%v)", p, err)
		}
	}
}

// TestSanity runs csi-test's sanity suite on node n1 and the controller socket. NodePublish
// bind-mounts: root only.
func TestSanity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	c, _ := start(t)
	cfg := sanity.NewTestConfig()
	cfg.Address = filepath.Join(c.state, "nodes", "n1", "csi.sock")
	cfg.ControllerAddress = c.controller
	cfg.TargetPath = filepath.Join(t.TempDir(), "mount")
	cfg.StagingPath = filepath.Join(t.TempDir(), "staging")
	cfg.TestVolumeExpandSize = 2 * cfg.TestVolumeSize
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
}

// TestExpansion walks a volume through what csi-provisioner, csi-resizer and a kubelet do to it
// when a claim grows under a running pod. Root only, as TestSanity.
func TestExpansion(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	c, _ := start(t)
	ctx := context.Background()
	ctrl := csi.NewControllerClient(dial(t, c.controller))
	node := csi.NewNodeClient(dial(t, filepath.Join(c.state, "nodes", "n2", "csi.sock")))
	mount := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	stats := func(path string) *csi.VolumeUsage {
		t.Helper()
		s, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "pvc-1", VolumePath: path})
		must(s, err)
		return s.Usage[0]
	}

	must(ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mount},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}}))
	pod := t.TempDir() // the kubelet makes the target's parent, the plugin the target
	target, ro := filepath.Join(pod, "mount"), filepath.Join(pod, "ro")
	for range 2 { // the second is a retry
		must(node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: target, VolumeCapability: mount}))
	}
	must(nil, os.WriteFile(filepath.Join(target, "db"), make([]byte, 1000), 0o600))
	if _, err := os.Stat(filepath.Join(c.state, "volumes", "pvc-1", "db")); err != nil {
		t.Fatal("not written to the volume's directory:", err)
	}
	if u := stats(target); u.Total != 1<<30 || u.Used != 1000 || u.Available != 1<<30-1000 {
		t.Fatalf("stats %v", u)
	}

	exp, err := ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
	if err != nil || exp.CapacityBytes != 2<<30 || !exp.NodeExpansionRequired {
		t.Fatalf("ControllerExpandVolume = %v, %v", exp, err)
	}
	if u := stats(target); u.Total != 1<<30 { // the "filesystem" is not grown yet
		t.Fatalf("stats %v before NodeExpandVolume", u)
	}
	nexp, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "pvc-1", VolumePath: target, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
	if err != nil || nexp.CapacityBytes != 2<<30 {
		t.Fatalf("NodeExpandVolume = %v, %v", nexp, err)
	}
	if u := stats(target); u.Total != 2<<30 || u.Used != 1000 {
		t.Fatalf("stats %v after NodeExpandVolume", u)
	}
	exp, err = ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
	if err != nil || exp.CapacityBytes != 2<<30 || exp.NodeExpansionRequired {
		t.Fatalf("ControllerExpandVolume again = %v, %v", exp, err)
	}

	must(node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: ro, VolumeCapability: mount, Readonly: true}))
	if err := os.WriteFile(filepath.Join(ro, "x"), nil, 0o600); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on the readonly mount: %v", err)
	}
	for _, p := range []string{target, ro, target} { // the third is a retry
		must(node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "pvc-1", TargetPath: p}))
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.state, "volumes", "pvc-1", "db")); err != nil {
		t.Fatal("unpublish lost the data:", err)
	}
	must(ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-1"}))
	if _, err := os.Lstat(filepath.Join(c.state, "volumes", "pvc-1")); !os.IsNotExist(err) {
		t.Fatalf("volume left: %v", err)
	}
}
