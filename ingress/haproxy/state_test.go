package haproxy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
)

func TestPlan(t *testing.T) {
	addr := netip.MustParseAddrPort("10.0.0.2:8080")
	web := api.IngressRoutes{Namespace: "d", Workload: "web", Rules: []api.IngressRule{
		{Host: "a.test", Path: "/", PortName: "http", Backends: []api.IngressBackend{{InstanceID: "web-1", Addr: addr}}},
		{Host: "a.test", Path: "/x", PortName: "http"},
	}}
	for _, tc := range []struct {
		name  string
		d     Desired
		o     Observed
		slots int
		want  []string
		err   string
	}{
		{
			name: "from empty: servers first, then entries",
			d:    DesiredOf([]api.IngressRoutes{web}),
			want: []string{
				"add server kat_b000/web-1 10.0.0.2:8080 check inter 1s fall 2 rise 1", "enable health kat_b000/web-1",
				"enable server kat_b000/web-1",
				"add map /r/exact.map a.test/x kat_b000",
				"add map /r/prefix.map a.test/ kat_b000", "add map /r/prefix.map a.test/x/ kat_b000",
			},
		},
		{
			name: "the slot the entries use is kept; a gone server is drained, then deleted",
			d:    DesiredOf([]api.IngressRoutes{web}),
			o: Observed{
				Exact:   map[string]string{"a.test/x": "kat_b005"},
				Prefix:  map[string]string{"a.test/": "kat_b005", "a.test/x/": "kat_b005", "old.test/": "kat_b001"},
				Servers: map[string]map[string]Server{"kat_b005": {"web-1": {Addr: "10.0.0.2:8080"}, "web-0": {Addr: "10.0.0.9:8080"}}},
			},
			want: []string{"del map /r/prefix.map old.test/", "set server kat_b005/web-0 state maint", "del server kat_b005/web-0"},
		},
		{
			name: "a server in maintenance that is wanted again is made ready",
			d:    DesiredOf([]api.IngressRoutes{web}),
			o: Observed{
				Exact:   map[string]string{"a.test/x": "kat_b000"},
				Prefix:  map[string]string{"a.test/": "kat_b000", "a.test/x/": "kat_b000"},
				Servers: map[string]map[string]Server{"kat_b000": {"web-1": {Addr: "10.0.0.2:8080", Maint: true}}},
			},
			want: []string{"set server kat_b000/web-1 state ready"},
		},
		{
			name:  "a full pool routes nothing new and says so",
			d:     DesiredOf([]api.IngressRoutes{web}),
			o:     Observed{Prefix: map[string]string{"old.test/": "kat_b000"}},
			slots: 1,
			want:  []string{"del map /r/prefix.map old.test/"},
			err:   "the pool of 1 backends is full: d/web:http not routed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots := tc.slots
			if slots == 0 {
				slots = DefaultSlots
			}
			got, err := Plan(tc.d, tc.o, "/r", slots)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Plan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
				t.Errorf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestStarting: the state a proxy starts in from RunFiles is the one
// Plan would have brought an empty proxy to: planning from it finds
// nothing to do, and a key that does not fit the pool is left out and
// reported.
func TestStarting(t *testing.T) {
	d := Desired{
		Exact:    map[string]string{"a.test/api": "default/api:81"},
		Prefix:   map[string]string{"a.test/": "default/web:80", "a.test/api/": "default/api:81"},
		Backends: map[string]map[string]string{"default/web:80": {"web-1": "10.0.0.2:80", "web-2": "10.0.0.3:80"}, "default/api:81": {"api-1": "10.0.0.4:81"}},
	}
	o := Starting(d, 2)
	web, api := o.Prefix["a.test/"], o.Exact["a.test/api"]
	if web == "" || api == "" || web == api || o.Prefix["a.test/api/"] != api || o.Slots != 2 {
		t.Fatalf("Starting = %+v, want web and api in slots of their own", o)
	}
	if o.Servers[web]["web-2"].Addr != "10.0.0.3:80" || len(o.Servers[web]) != 2 || o.Servers[api]["api-1"].Addr != "10.0.0.4:81" {
		t.Errorf("servers = %+v", o.Servers)
	}
	if cmds, err := Plan(d, o, "/run", 2); err != nil || len(cmds) != 0 {
		t.Errorf("Plan from Starting = %q, %v; want nothing to do", cmds, err)
	}
	small := Starting(d, 1)
	if len(small.Servers) != 1 {
		t.Errorf("Starting with one slot for two keys: servers %+v, want one key's", small.Servers)
	}
	if _, err := Plan(d, small, "/run", 1); err == nil || !strings.Contains(err.Error(), "not routed") {
		t.Errorf("Plan from a full pool: %v, want the key left out named", err)
	}
}

func TestParseServersState(t *testing.T) {
	out := "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord\n" +
		"4 kat_b000 1 web-1 10.0.0.2 2 1 1 1 2 1 0 0 2 0 0 0 - 8080 -\n"
	got, err := ParseServersState(out)
	if err != nil {
		t.Fatal(err)
	}
	if s := got["kat_b000"]["web-1"]; s != (Server{Addr: "10.0.0.2:8080", Maint: true}) {
		t.Errorf("web-1 = %+v", s)
	}
	if _, err := ParseServersState("1\n# be_name\nkat_b000\n"); err == nil {
		t.Error("a line without srv_name parsed")
	}
}

// TestParseProcAndSlots: the master's reload counts (as HAProxy 2.6.12
// answers after a failed reload) and the pool's size from show backend.
func TestParseProcAndSlots(t *testing.T) {
	proc := "#<PID>          <type>          <reloads>       <uptime>        <version>\n" +
		"20123           master          2 [failed: 1]   0d00h10m22s     2.6.12-1+deb12u4\n# workers\n" +
		"18460           worker          1               0d00h00m05s     2.6.12-1+deb12u4\n# programs\n"
	if p, err := ParseProc(proc); err != nil || p != (Proc{Reloads: 2, Failed: 1}) {
		t.Errorf("ParseProc = %+v, %v; want 2 reloads, 1 failed", p, err)
	}
	for _, bad := range []string{"", "1 master x [failed: 0] 0d 2.6\n", "1 master 2 [failed: y] 0d 2.6\n"} {
		if _, err := ParseProc(bad); err == nil {
			t.Errorf("ParseProc(%q) parsed", bad)
		}
	}
	if n := ParseSlots("# name\nkat_none\nkat_b000\nkat_b001\nkat_b002\nkat_b004\n"); n != 3 {
		t.Errorf("ParseSlots = %d, want 3 (kat_b000 to kat_b002; kat_b004 is past a gap)", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0x55 a.test/ kat_b000\n")
	f.Add("1 master 2 [failed: 1] 0d00h10m22s 2.6.12\n")
	f.Add("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_port\n4 kat_b000 1 w 10.0.0.1 2 0 80\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseMap(s)
		_, _ = ParseServersState(s)
		_, _ = ParseProc(s)
		_ = ParseSlots(s)
	})
}
