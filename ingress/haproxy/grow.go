package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ErrReloadFailed is a reload whose new configuration HAProxy did not
// load: its workers before the reload keep serving.
var ErrReloadFailed = errors.New("haproxy did not load the new configuration and keeps serving the last good one")

// reloadTimeout bounds the wait for a reload's outcome.
const reloadTimeout = 15 * time.Second

// Grow makes the pool of the proxy whose run directory on this host is
// hostDir, and whose state is o, hold want backends: it rewrites the
// configuration with the bigger pool and o's servers (those not in
// maintenance) as static servers of their slots, writes o's map entries
// into the map files, and reloads HAProxy through its master socket. This
// is the only reload KAT makes, and the new worker starts with the routes
// and servers the old one had. A reload HAProxy fails leaves its workers
// serving: Grow then puts the files back as they were, so a restart loads
// the last good configuration too, and returns ErrReloadFailed.
func Grow(ctx context.Context, hostDir string, o Observed, want int) error {
	if want <= o.Slots {
		return nil
	}
	cfgFile := filepath.Join(hostDir, ConfigFile)
	cfg, err := os.ReadFile(cfgFile)
	if err != nil {
		return fmt.Errorf("grow the pool to %d backends: %w", want, err)
	}
	// Render ends with the pool: cut there and write it again.
	at := bytes.Index(cfg, []byte("\nbackend "+SlotName(0)+"\n"))
	if at < 0 {
		return fmt.Errorf("grow the pool to %d backends: %s has no backend %s", want, ConfigFile, SlotName(0))
	}
	files := map[string][]byte{
		ConfigFile: append(slices.Clip(cfg[:at]), poolWithServers(want, o.Servers)...),
		ExactMap:   mapFile(o.Exact),
		PrefixMap:  mapFile(o.Prefix),
	}
	old := map[string][]byte{ConfigFile: cfg}
	for _, name := range []string{ExactMap, PrefixMap} {
		if old[name], err = os.ReadFile(filepath.Join(hostDir, name)); err != nil {
			return fmt.Errorf("grow the pool to %d backends: %w", want, err)
		}
	}
	master := Client{Socket: filepath.Join(hostDir, MasterSock)}
	before, err := master.proc(ctx)
	if err != nil {
		return fmt.Errorf("grow the pool to %d backends: %w", want, err)
	}
	// The map files first: a configuration naming the bigger pool is
	// only ever loaded with them.
	for _, name := range []string{ExactMap, PrefixMap, ConfigFile} {
		if err = writeFile(filepath.Join(hostDir, name), files[name]); err != nil {
			break
		}
	}
	var after Proc
	if err == nil {
		after, err = master.reload(ctx, before)
	}
	if err == nil && after.Failed > before.Failed {
		err = ErrReloadFailed
	}
	if err != nil {
		for _, name := range []string{ConfigFile, ExactMap, PrefixMap} {
			if rerr := writeFile(filepath.Join(hostDir, name), old[name]); rerr != nil {
				err = errors.Join(err, fmt.Errorf("put the last good configuration back: %w", rerr))
			}
		}
		return fmt.Errorf("grow the pool to %d backends: %w", want, err)
	}
	return nil
}

// poolWithServers is Pool(0, slots) with each slot's servers (by slot and
// name) that are not in maintenance, as Plan adds them: a proxy loading it
// has them from its start.
func poolWithServers(slots int, servers map[string]map[string]Server) []byte {
	var b bytes.Buffer
	for i := range slots {
		slot := SlotName(i)
		b.Write(Pool(i, i+1))
		for _, id := range slices.Sorted(maps.Keys(servers[slot])) {
			if s := servers[slot][id]; !s.Maint {
				fmt.Fprintf(&b, "    server %s %s %s\n", id, s.Addr, serverOptions)
			}
		}
	}
	return b.Bytes()
}

// mapFile is a map file holding entries.
func mapFile(entries map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		fmt.Fprintf(&b, "%s %s\n", k, entries[k])
	}
	return b.Bytes()
}

// proc asks the master for its reload counts.
func (c Client) proc(ctx context.Context) (Proc, error) {
	out, err := c.Run(ctx, "show proc; quit") // the master CLI keeps a connection open without quit
	if err != nil {
		return Proc{}, err
	}
	return ParseProc(out)
}

// reload asks the master to reload and waits until it has tried: its
// reload count passes before's.
func (c Client) reload(ctx context.Context, before Proc) (Proc, error) {
	if _, err := c.Run(ctx, "reload; quit"); err != nil {
		return Proc{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p, err := c.proc(ctx)
		if err == nil && p.Reloads > before.Reloads {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return Proc{}, fmt.Errorf("haproxy reload: no outcome within %s: %w", reloadTimeout, errors.Join(err, ctx.Err()))
		case <-tick.C:
		}
	}
}

// writeFile replaces file with body through a rename, so HAProxy never
// reads half of it.
func writeFile(file string, body []byte) error {
	tmp := file + ".new"
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(file), err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(file), err)
	}
	return nil
}

// Applied is what Sync did.
type Applied struct {
	// Commands is how many runtime commands it ran.
	Commands int
	// Slots is the size of the pool after it; Grown says it grew.
	Slots int
	Grown bool
	// GrowFailed says the pool needed to grow and could not; GrowErr says
	// why.
	GrowFailed bool
	GrowErr    error
}

// Sync brings the proxy behind c, whose run directory is hostDir on this
// host and dir as HAProxy sees it, to d: it grows the pool first when d
// has more backend keys than the pool has slots and grow allows it, then
// runs Plan's commands. A pool that could not grow still gets the routes
// that fit, and the error says which did not.
func Sync(ctx context.Context, c Client, hostDir, dir string, d Desired, grow bool) (Applied, error) {
	o, err := c.Observe(ctx, dir)
	if err != nil {
		return Applied{}, err
	}
	var a Applied
	var growErr error
	if need := SlotsFor(len(d.Backends)); need > o.Slots && grow {
		growErr = Grow(ctx, hostDir, o, need)
		a.GrowFailed, a.GrowErr = growErr != nil, growErr
		if growErr == nil {
			a.Grown = true
			if o, err = c.Observe(ctx, dir); err != nil {
				return a, err
			}
		}
	}
	a.Slots = o.Slots
	cmds, planErr := Plan(d, o, dir, o.Slots)
	a.Commands = len(cmds)
	return a, errors.Join(growErr, planErr, c.Exec(ctx, cmds))
}
