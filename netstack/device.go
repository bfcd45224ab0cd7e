package netstack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Config configures Open.
type Config struct {
	// Interface is the WireGuard interface's name. Default
	// DefaultInterface.
	Interface string
	// Port is the UDP port WireGuard listens on. Default DefaultPort.
	Port int
	// Mode chooses kernel or userspace. Default ModeAuto.
	Mode Mode
	// PrivateKey is the node's WireGuard key. Required.
	PrivateKey wgtypes.Key
	// Underlay is the node's address on the network between nodes: the
	// MTU of its interface, less Overhead, is the overlay's. Default
	// unset: DefaultMTU.
	Underlay netip.Addr
	// MTU overrides the MTU derived from Underlay. Default 0: derived.
	MTU int
	// Logger receives the device's events; the userspace device's own
	// errors go to it at warn level, its chatter at debug level.
	Logger zerolog.Logger
}

// Types of device, as Device.Type reports them (wgtypes.DeviceType's
// names).
const (
	TypeKernel    = "Linux kernel"
	TypeUserspace = "userspace"
)

// Device is an open WireGuard interface. Its methods are safe for
// concurrent use.
type Device struct {
	cfg  Config
	mtu  int
	log  zerolog.Logger
	mu   sync.Mutex
	wg   *wgctrl.Client
	typ  string
	user *userspace // the userspace device in this process, or nil
	// proc is the userspace device in a process of its own (DeviceMain),
	// or nil.
	proc *deviceProcess
	// nodes names the peers of the last Sync, by public key.
	nodes map[wgtypes.Key]string
}

// userspace is the embedded wireguard-go device and its UAPI listener.
type userspace struct {
	dev      *device.Device
	uapi     net.Listener
	accepted sync.WaitGroup
}

// ErrNoKernelModule means the kernel has no WireGuard (ModeKernel).
var ErrNoKernelModule = errors.New("netstack: the kernel has no WireGuard module")

// Open opens the WireGuard interface cfg names: the kernel's or an embedded
// userspace one (see Mode), with the private key and port set, the MTU
// derived from the underlay, and the link up. A kernel interface that
// exists already is reused (its peers are reconciled by Sync); an existing
// interface of another type is refused, as it is not this node's.
func Open(cfg Config) (*Device, error) {
	if cfg.Interface == "" {
		cfg.Interface = DefaultInterface
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeAuto
	}
	if p := InterfaceNameProblem(cfg.Interface); p != "" {
		return nil, fmt.Errorf("netstack: interface name %s", p)
	}
	if cfg.Mode == ModeOff {
		return nil, errors.New("netstack: mode off opens no device")
	}
	d := &Device{cfg: cfg, log: cfg.Logger.With().Str("interface", cfg.Interface).Logger(), mtu: cfg.MTU}
	if d.mtu == 0 {
		d.mtu = OverlayMTU(underlayMTU(cfg.Underlay))
	}
	var err error
	if d.wg, err = wgctrl.New(); err != nil {
		return nil, fmt.Errorf("netstack: open wgctrl: %w", err)
	}
	if err := d.open(); err != nil {
		d.wg.Close()
		return nil, err
	}
	if err := d.setUp(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// open creates (or finds) the interface as cfg.Mode says.
func (d *Device) open() error {
	name := d.cfg.Interface
	link, err := netlink.LinkByName(name)
	if err == nil {
		if link.Type() != "wireguard" || d.cfg.Mode == ModeUserspace {
			return fmt.Errorf("netstack: interface %s exists already (type %s) and is not this node's: stop what made it or choose another interface name", name, link.Type())
		}
		d.typ = TypeKernel
		d.log.Info().Str("device_type", "kernel").Msg("reusing the kernel WireGuard interface")
		return nil
	}
	if d.cfg.Mode != ModeUserspace {
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: d.mtu}})
		switch {
		case err == nil:
			d.typ = TypeKernel
			d.log.Info().Str("device_type", "kernel").Int("mtu", d.mtu).Msg("created a kernel WireGuard interface")
			return nil
		case !noKernelModule(err):
			return fmt.Errorf("netstack: create the kernel WireGuard interface %s: %w", name, err)
		case d.cfg.Mode == ModeKernel:
			return fmt.Errorf("%w (creating %s: %w); use mode auto or userspace", ErrNoKernelModule, name, err)
		}
		d.log.Info().Err(err).Msg("no WireGuard kernel module: using the embedded userspace device")
	}
	if err := d.openUserspace(); err != nil {
		return err
	}
	d.typ = TypeUserspace
	d.log.Info().Str("device_type", "userspace").Int("mtu", d.mtu).Msg("created a userspace WireGuard interface")
	return nil
}

// noKernelModule reports whether a link add failed because the kernel does
// not know the link kind "wireguard".
func noKernelModule(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || strings.Contains(err.Error(), "not supported")
}

// openUserspace starts the embedded device, in a process of its own when
// the program runs devices so (DeviceMain), else in this one.
func (d *Device) openUserspace() error {
	if ownProcess.Load() {
		p, err := startDeviceProcess(d.cfg.Interface, d.mtu, d.log)
		if err != nil {
			return err
		}
		d.proc = p
		return nil
	}
	dlog := d.log
	u, err := startDevice(d.cfg.Interface, d.mtu, &device.Logger{
		Verbosef: func(format string, args ...any) { dlog.Debug().Msgf(format, args...) },
		Errorf:   func(format string, args ...any) { dlog.Warn().Msgf(format, args...) },
	})
	if err != nil {
		return err
	}
	d.user = u
	return nil
}

// startDevice starts a wireguard-go device on TUN interface name: the UAPI
// socket first (a live socket of the same name means another process runs
// this interface; a stale one is replaced), then the TUN interface and the
// device, and serves the UAPI socket until close.
func startDevice(name string, mtu int, logger *device.Logger) (*userspace, error) {
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		return nil, fmt.Errorf("netstack: open the UAPI socket of %s (/var/run/wireguard/%s.sock, shared by every network namespace: is another node of this machine using the name?): %w", name, name, err)
	}
	defer f.Close()
	tdev, err := tun.CreateTUN(name, mtu)
	if err != nil {
		_ = os.Remove("/var/run/wireguard/" + name + ".sock")
		return nil, fmt.Errorf("netstack: create the TUN interface %s: %w", name, err)
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), logger)
	l, err := ipc.UAPIListen(name, f)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("netstack: listen on the UAPI socket of %s: %w", name, err)
	}
	u := &userspace{dev: dev, uapi: l}
	u.accepted.Add(1)
	go func() {
		defer u.accepted.Done()
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := l.Accept()
			if err != nil {
				return // the listener closed
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				dev.IpcHandle(c) // closes c
			}()
		}
	}()
	return u, nil
}

// close stops the device: its UAPI socket, interface and routes go.
func (u *userspace) close() {
	_ = u.uapi.Close() // unlinks the socket; Accept returns
	u.dev.Close()
	u.accepted.Wait()
}

// setUp sets the key and port, the MTU, and brings the link up.
func (d *Device) setUp() error {
	name := d.cfg.Interface
	port := d.cfg.Port
	if err := d.wg.ConfigureDevice(name, wgtypes.Config{PrivateKey: &d.cfg.PrivateKey, ListenPort: &port}); err != nil {
		return fmt.Errorf("netstack: set the key and port %d of %s: %w", port, name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netstack: find interface %s: %w", name, err)
	}
	if link.Attrs().MTU != d.mtu {
		if err := netlink.LinkSetMTU(link, d.mtu); err != nil {
			return fmt.Errorf("netstack: set the MTU of %s to %d: %w", name, d.mtu, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("netstack: bring %s up: %w", name, err)
	}
	if d.user != nil {
		if err := d.user.dev.Up(); err != nil {
			return fmt.Errorf("netstack: start the userspace device %s: %w", name, err)
		}
	}
	if d.proc != nil {
		if err := d.proc.up(); err != nil {
			return fmt.Errorf("netstack: start the userspace device %s: %w", name, err)
		}
	}
	return nil
}

// Name is the interface's name.
func (d *Device) Name() string { return d.cfg.Interface }

// Type is TypeKernel or TypeUserspace.
func (d *Device) Type() string { return d.typ }

// MTU is the interface's MTU.
func (d *Device) MTU() int { return d.mtu }

// Close stops a userspace device (its interface, routes and UAPI socket go)
// and leaves a kernel one in place, so traffic to this node's containers
// flows on while its agent restarts. It is safe to call more than once.
func (d *Device) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.user != nil {
		d.user.close()
		d.user = nil
	}
	if d.proc != nil {
		d.proc.close()
		d.proc = nil
	}
	if d.wg != nil {
		_ = d.wg.Close()
		d.wg = nil
	}
}

// underlayMTU is the MTU of the interface holding addr; 0 when addr is
// unset, a loopback address or on no interface.
func underlayMTU(addr netip.Addr) int {
	if !addr.IsValid() || addr.IsLoopback() {
		return 0
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return 0
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr.Unmap() {
			link, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				return 0
			}
			return link.Attrs().MTU
		}
	}
	return 0
}
