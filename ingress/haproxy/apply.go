package haproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Observe reads HAProxy's maps, its pool's size and servers.
func (c Client) Observe(ctx context.Context, dir string) (Observed, error) {
	var o Observed
	var err error
	if o.Exact, err = c.showMap(ctx, dir+"/"+ExactMap); err != nil {
		return o, err
	}
	if o.Prefix, err = c.showMap(ctx, dir+"/"+PrefixMap); err != nil {
		return o, err
	}
	out, err := c.Run(ctx, "show servers state")
	if err != nil {
		return o, err
	}
	all, err := ParseServersState(out)
	if err != nil {
		return o, err
	}
	o.Servers = map[string]map[string]Server{}
	for b, servers := range all {
		if strings.HasPrefix(b, "kat_b") {
			o.Servers[b] = servers
		}
	}
	if out, err = c.Run(ctx, "show backend"); err != nil {
		return o, err
	}
	o.Slots = ParseSlots(out)
	return o, nil
}

// showMap reads the entries of a map file, by key.
func (c Client) showMap(ctx context.Context, file string) (map[string]string, error) {
	out, err := c.Run(ctx, "show map "+file)
	if err != nil {
		return nil, err
	}
	return ParseMap(out)
}

// answers of commands that succeeded with something to say.
var okAnswers = []string{"New server registered.", "Server deleted.",
	"New empty certificate store", "Transaction created for certificate", "Success!", "' deleted!", "' deleted in crtlist"}

// Exec runs cmds in order. A command HAProxy refuses does not stop the
// others (each changes one entry or server); the error joins every
// refusal, each naming its command without a payload. A refused "del
// server" of a server that still has connections is no error: the next
// pass tries again.
func (c Client) Exec(ctx context.Context, cmds []string) error {
	var errs []error
	for _, cmd := range cmds {
		out, err := c.Run(ctx, cmd)
		if err != nil {
			return errors.Join(append(errs, err)...) // the socket failed: stop
		}
		ans := strings.TrimSpace(out)
		switch {
		case ans == "" || containsAny(ans, okAnswers):
		case strings.HasPrefix(cmd, "del server ") && strings.Contains(ans, "still has connections"):
		default:
			errs = append(errs, fmt.Errorf("%w: %s: %s", ErrRefused, cmdForError(cmd), answerForError(ans)))
		}
	}
	return errors.Join(errs...)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// cmdForError is a command as an error may show it: every command Plan
// makes names only hosts, paths, backends, instance IDs and addresses; a
// payload ("<<" and what follows: a certificate's key) is cut off.
func cmdForError(cmd string) string {
	cmd, _, _ = strings.Cut(cmd, "\n")
	cmd, _, _ = strings.Cut(cmd, " <<")
	return cut(cmd)
}

// answerForError is HAProxy's answer as an error may show it: the lines
// that say why, up to any that starts PEM.
func answerForError(ans string) string {
	var lines []string
	for line := range strings.Lines(ans) {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "-----") {
			break // PEM from here on
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
	return cut(strings.Join(lines, "; "))
}
