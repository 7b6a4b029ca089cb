// Command csi-hostdir is the CSI driver of the local test cluster whose volumes can grow: each
// volume is a plain directory on this host, published by bind mounts, and its capacity is a
// number it records (ControllerExpandVolume, then NodeExpandVolume), so that an e2e test can
// grow a claim through the real external-resizer and the real kubelet.
//
// One host process serves every kubelet of the host (the local cluster runs several, each with
// its own --root-dir, all in the host's mount namespace): a controller socket for
// csi-provisioner and csi-resizer, and per kubelet a node socket, which it registers with that
// kubelet itself (the kubelet's plugin registration API, without node-driver-registrar).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	driverName    = "hostdir.csi.etcd-operator.dev"
	driverVersion = "0.1.0"
	// A unix socket's path fits in sun_path, 108 bytes with the final NUL; the local cluster's
	// kubelet root dirs are deep enough for plugins_registry/<driver>-reg.sock not to.
	maxSocketPath = 107
)

// kubelet is one --node NAME=KUBELET_ROOT_DIR.
type kubelet struct{ name, root string }

type config struct {
	state      string // volumes/ and nodes/ go here
	controller string // the controller socket's path
	kubelets   []kubelet
}

func main() {
	var c config
	flag.StringVar(&c.state, "state", "", "state directory: volumes/ID (a volume), volumes/ID.json (its capacity), nodes/NAME/csi.sock")
	flag.StringVar(&c.controller, "controller-endpoint", "", "the socket of the Identity, Controller and Node services for csi-provisioner and csi-resizer, unix:///path/csi.sock")
	flag.Func("node", "NAME=KUBELET_ROOT_DIR, once per kubelet of this host: serves node NAME on STATE/nodes/NAME/csi.sock and registers it with that kubelet (a socket in KUBELET_ROOT_DIR/plugins_registry)", func(s string) error {
		name, root, _ := strings.Cut(s, "=")
		if root == "" || name == "" || name == "." || name == ".." || strings.Contains(name, "/") { // nodes/NAME is a directory
			return errors.New("want NAME=KUBELET_ROOT_DIR")
		}
		c.kubelets = append(c.kubelets, kubelet{name, root})
		return nil
	})
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "csi-hostdir %s: CSI driver %s, volumes that are directories of this host, with expansion\n"+
			"usage: csi-hostdir --state DIR --controller-endpoint unix:///path/csi.sock [--node NAME=KUBELET_ROOT_DIR]...\n",
			driverVersion, driverName)
		flag.PrintDefaults()
	}
	flag.Parse()
	c.controller = strings.TrimPrefix(c.controller, "unix://")
	if c.state == "" || c.controller == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	r, err := serve(c)
	if err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	log.Printf("stopping on %v", <-sig)
	r.stop()
}

// running is what serve started: stop takes it down and removes its sockets, so that the
// kubelets see the plugin go (they watch plugins_registry) rather than keep a dead socket.
type running struct {
	servers []*grpc.Server
	sockets []string
}

func (r *running) stop() {
	for _, s := range r.servers {
		s.Stop()
	}
	for _, p := range r.sockets {
		_ = os.Remove(p)
	}
}

func serve(c config) (*running, error) {
	st := &store{dir: filepath.Join(c.state, "volumes")}
	if err := os.MkdirAll(st.dir, 0o750); err != nil {
		return nil, err
	}
	r := &running{}
	start := func(path, label string, register func(*grpc.Server)) error {
		l, err := listen(path)
		if err != nil {
			return err
		}
		s := grpc.NewServer(grpc.UnaryInterceptor(st.intercept(label)))
		register(s)
		r.servers, r.sockets = append(r.servers, s), append(r.sockets, path)
		go func() {
			if err := s.Serve(l); err != nil {
				log.Fatalf("%s: %v", label, err)
			}
		}()
		log.Printf("%s: serving %s", label, path)
		return nil
	}
	csiServices := func(node string, controller bool) func(*grpc.Server) {
		return func(s *grpc.Server) {
			p := &plugin{store: st, node: node}
			csi.RegisterIdentityServer(s, p)
			csi.RegisterNodeServer(s, p)
			if controller {
				csi.RegisterControllerServer(s, p)
			}
		}
	}
	// The controller socket serves Node too (csi-sanity can then use one socket); its node is
	// this host, which every volume is on.
	host, _ := os.Hostname()
	err := start(c.controller, "controller", csiServices(host, true))
	for i := 0; err == nil && i < len(c.kubelets); i++ {
		k := c.kubelets[i]
		sock := filepath.Join(c.state, "nodes", k.name, "csi.sock")
		if err = start(sock, "node "+k.name, csiServices(k.name, false)); err == nil {
			// After the node socket: the kubelet dials the endpoint as soon as it sees this one.
			reg := filepath.Join(k.root, "plugins_registry", driverName+"-reg.sock")
			if len(reg) > maxSocketPath { // the kubelet registers any socket there
				reg = filepath.Join(k.root, "plugins_registry", "hostdir-reg.sock")
			}
			err = start(reg, "registration "+k.name, func(s *grpc.Server) {
				registerapi.RegisterRegistrationServer(s, &registration{node: k.name, endpoint: sock})
			})
		}
	}
	if err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// listen makes a unix socket at path, in place of a stale one that no process serves.
func listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath { // bind would only say "invalid argument"
		return nil, fmt.Errorf("socket path %s is longer than %d bytes", path, maxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process serves it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	return net.Listen("unix", path)
}

// intercept serializes the calls of every socket (they share the state directory, and none is
// slow enough to be worth finer locks) and logs each in one line. The requests are logged whole:
// they carry no secrets, the StorageClass names none.
func (st *store) intercept(label string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		t := time.Now()
		resp, err := handler(ctx, req)
		method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		result := fmt.Sprintf("{%v}", resp)
		if err != nil {
			s, _ := status.FromError(err)
			result = fmt.Sprintf("%v: %s", s.Code(), s.Message())
		}
		log.Printf("%s: %s {%v} -> %s (%v)", label, method, req, result, time.Since(t).Round(time.Microsecond))
		return resp, err
	}
}

// registration answers one kubelet's plugin watcher, as node-driver-registrar would.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	node, endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              driverName,
		Endpoint:          r.endpoint, // a path: the kubelet dials it as a unix socket
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("registration %s: the kubelet refused the plugin: %s", r.node, s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
