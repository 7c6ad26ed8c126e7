package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ephemeralRangeFile holds the kernel's range of ephemeral ports, the ports
// it gives to listeners on port 0 and to the local end of outgoing
// connections.
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// lowestPickedPort is the lowest port FreePortOn picks: above the ports
// system services and most development servers use.
const lowestPickedPort = 10000

// portAttempts bounds how many ports FreePortOn tries.
const portAttempts = 200

// FreePort returns a port free on 127.0.0.1, picked as FreePortOn picks.
func FreePort() (int, error) { return FreePortOn("127.0.0.1") }

// FreePortOn returns a port free on address host, for a server a test
// starts a moment later. It is picked at random below the kernel's
// ephemeral range: a port from that range (what a listener on port 0 gets)
// may be taken in between by the local end of any outgoing connection on
// the machine, and a busy test run makes thousands; the kernel assigns no
// port below it on its own. The port is checked free by binding it once.
func FreePortOn(host string) (int, error) {
	low, high := portPickRange()
	var lastErr error
	for range portAttempts {
		port := low + rand.IntN(high-low+1)
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			_ = l.Close()
			return port, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		lastErr = err
	}
	return 0, fmt.Errorf("find a free port on %s: %d ports tried: %w", host, portAttempts, lastErr)
}

// portPickRange is the range FreePortOn picks from: from lowestPickedPort
// to just below the ephemeral range, or to 32767 (Linux's default range
// starts at 32768) when that range cannot be read or leaves too little
// room below it.
func portPickRange() (low, high int) {
	low, high = lowestPickedPort, 32767
	b, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return low, high
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return low, high
	}
	first, err := strconv.Atoi(fields[0])
	if err != nil || first-1 < low+1000 {
		return low, high
	}
	return low, first - 1
}
