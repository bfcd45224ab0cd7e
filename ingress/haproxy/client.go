package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Client talks to HAProxy's runtime API on its admin socket, one command
// per connection.
type Client struct {
	// Socket is the admin socket's path on this host.
	Socket string
	// Timeout bounds one command. Default 3s.
	Timeout time.Duration
}

// maxSunPath is the longest socket path connect(2) takes (sun_path holds
// 108 bytes with the terminating zero).
const maxSunPath = 107

// Run sends one command and returns HAProxy's answer. Errors name the
// command's verb (its first two words), never its arguments.
func (c Client) Run(ctx context.Context, cmd string) (string, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, closeDir, err := c.dial(ctx)
	if err != nil {
		return "", fmt.Errorf("haproxy %s: %w: %w", verb(cmd), ErrUnreachable, err)
	}
	defer closeDir()
	defer func() { _ = conn.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", fmt.Errorf("haproxy %s: send: %w", verb(cmd), err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("haproxy %s: read the answer: %w", verb(cmd), err)
	}
	return string(out), nil
}

// dial connects to the socket. A path too long for sun_path is reached
// through the directory opened O_PATH, as /proc/self/fd/N/admin.sock.
func (c Client) dial(ctx context.Context) (net.Conn, func(), error) {
	var d net.Dialer
	if len(c.Socket) <= maxSunPath {
		conn, err := d.DialContext(ctx, "unix", c.Socket)
		return conn, func() {}, err
	}
	fd, err := unix.Open(filepath.Dir(c.Socket), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open the socket's directory: %w", err)
	}
	dir := os.NewFile(uintptr(fd), filepath.Dir(c.Socket))
	conn, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(c.Socket)))
	if err != nil {
		_ = dir.Close()
		return nil, nil, err
	}
	return conn, func() { _ = dir.Close() }, nil
}

// verb is the first two words of a command: what an error may name.
func verb(cmd string) string {
	f := strings.Fields(cmd)
	return strings.Join(f[:min(2, len(f))], " ")
}

// ErrUnreachable is a socket nothing answers on: HAProxy is starting,
// stopped or gone.
var ErrUnreachable = errors.New("no answer on the socket")

// ErrRefused is a command HAProxy answered with an error.
var ErrRefused = errors.New("haproxy refused the command")
