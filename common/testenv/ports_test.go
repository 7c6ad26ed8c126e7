package testenv

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortsAreBelowTheEphemeralRange: a port a server is started on a
// moment after it was picked must not be one the kernel may hand to the
// local end of an outgoing connection in between.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatalf("this test reads the kernel's ephemeral range: %v", err)
	}
	first, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatalf("parse %q: %v", b, err)
	}
	seen := map[int]bool{}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port >= first || port < lowestPickedPort {
			t.Fatalf("picked port %d; want one in [%d, %d)", port, lowestPickedPort, first)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("picked port %d is not free: %v", port, err)
		}
		_ = l.Close()
		seen[port] = true
	}
	if len(seen) < 40 {
		t.Fatalf("50 picks gave only %d distinct ports: not picked at random", len(seen))
	}
}
