package runtime

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// IDMapSize is how many uids and gids one workload's map covers.
const IDMapSize = 65536

// IDMap is an explicit user namespace: container ids 0..IDMapSize-1 are host
// ids HostBase..HostBase+IDMapSize-1.
type IDMap struct {
	// HostBase is the host uid and gid of container root; never 0.
	HostBase int64
}

// SubIDRange is a range of subordinate ids of /etc/subuid and /etc/subgid.
type SubIDRange struct {
	Start, Count int64
}

// Slots returns how many IDMapSize maps fit in the range.
func (r SubIDRange) Slots() int64 { return r.Count / IDMapSize }

// Map returns the map of slot, and false when the slot is outside the range.
func (r SubIDRange) Map(slot int) (*IDMap, bool) {
	if slot < 0 || int64(slot) >= r.Slots() || r.Start <= 0 {
		return nil, false
	}
	return &IDMap{HostBase: r.Start + int64(slot)*IDMapSize}, true
}

// ReadSubIDRange returns user's range in subuid, which must equal its range
// in subgid (the same map is used for both). Podman's --userns=auto draws from
// the ranges of the user "containers".
func ReadSubIDRange(subuid, subgid, user string) (SubIDRange, error) {
	u, err := readSubID(subuid, user)
	if err != nil {
		return SubIDRange{}, err
	}
	g, err := readSubID(subgid, user)
	if err != nil {
		return SubIDRange{}, err
	}
	if u != g {
		return SubIDRange{}, fmt.Errorf("sub-id ranges of %s differ: %s has %d:%d, %s has %d:%d", user, subuid, u.Start, u.Count, subgid, g.Start, g.Count)
	}
	if u.Start <= 0 || u.Slots() == 0 {
		return SubIDRange{}, fmt.Errorf("sub-id range %d:%d of %s in %s holds no %d ids above 0", u.Start, u.Count, user, subuid, IDMapSize)
	}
	return u, nil
}

// readSubID returns the first range of user in a subuid/subgid file.
func readSubID(path, user string) (SubIDRange, error) {
	f, err := os.Open(path)
	if err != nil {
		return SubIDRange{}, fmt.Errorf("read sub-id ranges: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || parts[0] != user {
			continue
		}
		start, err1 := strconv.ParseInt(parts[1], 10, 64)
		count, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err1 != nil || err2 != nil || start < 0 || count < 0 {
			return SubIDRange{}, fmt.Errorf("read sub-id ranges: %s: bad line %q", path, sc.Text())
		}
		return SubIDRange{Start: start, Count: count}, nil
	}
	if err := sc.Err(); err != nil {
		return SubIDRange{}, fmt.Errorf("read sub-id ranges: %s: %w", path, err)
	}
	return SubIDRange{}, fmt.Errorf("read sub-id ranges: %s has no range for %s", path, user)
}
