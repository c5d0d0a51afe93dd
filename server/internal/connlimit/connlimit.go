// Package connlimit bounds the connections a listener hands out: in total,
// and per remote address, with a reserve beyond the total that only
// trusted networks (loopback, an operator's subnet) may use, so that an
// operator and the health checks get in when a flood has taken every
// ordinary slot (PostgreSQL's superuser_reserved_connections, decided
// here by address because a connection's principal is known only once a
// request arrives on it). A connection over a limit is closed at once,
// with a reset, never queued; the refusals are logged at most once per
// interval, with their count.
package connlimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are the bounds of a Listener.
type Limits struct {
	// Total is how many connections may be open at once (Reserved more
	// from Trusted networks). It must be positive.
	Total int
	// PerAddress is how many connections one remote address may have open
	// at once; 0 is no limit but Total. Trusted addresses are exempt.
	PerAddress int
	// Reserved is how many connections beyond Total only Trusted
	// addresses may open.
	Reserved int
	// Trusted are the networks whose connections may use the reserve and
	// have no per-address limit.
	Trusted []netip.Prefix
	// TotalFlag, PerAddressFlag and ReservedFlag name the flags that
	// change the limits, for the log line of a refusal.
	TotalFlag, PerAddressFlag, ReservedFlag string
}

// Listener is a net.Listener that enforces Limits. Its methods may be
// called concurrently.
type Listener struct {
	net.Listener
	limits Limits
	log    *slog.Logger
	every  time.Duration

	mu     sync.Mutex
	open   int
	byAddr map[netip.Prefix]int
	// lastLog is when a refusal was last logged; quiet counts the
	// refusals since, which the next log line reports.
	lastLog time.Time
	quiet   int

	refused atomic.Int64
	// onRefuse hears the flag of each refusal's limit (nil: nobody).
	onRefuse func(flag string)
}

// Option configures New.
type Option func(*Listener)

// WithLogger sets where refusals are logged (default slog.Default()).
func WithLogger(log *slog.Logger) Option { return func(l *Listener) { l.log = log } }

// WithRefusalHook makes every refusal call fn with the flag of the limit
// that refused it (Limits' TotalFlag, PerAddressFlag or ReservedFlag), on
// the accepting goroutine: fn must not block.
func WithRefusalHook(fn func(flag string)) Option { return func(l *Listener) { l.onRefuse = fn } }

// WithLogInterval sets how often at most a refusal is logged (default
// DefaultLogInterval).
func WithLogInterval(d time.Duration) Option { return func(l *Listener) { l.every = d } }

// DefaultLogInterval is how often at most a refusal is logged: a flood
// of thousands of connections a second writes one line per interval, with
// the count.
const DefaultLogInterval = 10 * time.Second

// New wraps ln. It fails when the limits are not positive where they must
// be.
func New(ln net.Listener, limits Limits, opts ...Option) (*Listener, error) {
	switch {
	case limits.Total <= 0:
		return nil, fmt.Errorf("connlimit: the total (%s) is %d; it must be positive", limits.TotalFlag, limits.Total)
	case limits.PerAddress < 0:
		return nil, fmt.Errorf("connlimit: the limit per address (%s) is %d; it must be 0 (none) or positive", limits.PerAddressFlag, limits.PerAddress)
	case limits.Reserved < 0:
		return nil, fmt.Errorf("connlimit: the reserve (%s) is %d; it must be 0 or positive", limits.ReservedFlag, limits.Reserved)
	}
	l := &Listener{Listener: ln, limits: limits, log: slog.Default(), every: DefaultLogInterval, byAddr: map[netip.Prefix]int{}}
	for _, opt := range opts {
		opt(l)
	}
	return l, nil
}

// Accept waits for the next connection within the limits: one over a
// limit is closed at once and Accept waits for the next. Closing the
// returned connection frees its slot.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr, trusted := l.classify(c.RemoteAddr())
		if why, flag := l.admit(addr, trusted); why != "" {
			l.refuse(c, addr, why, flag)
			continue
		}
		return &conn{Conn: c, release: func() { l.release(addr, trusted) }}, nil
	}
}

// Stats are a Listener's counters.
type Stats struct {
	// Open is the number of connections open now.
	Open int
	// Refused counts the connections closed at once for a limit.
	Refused int64
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.open, Refused: l.refused.Load()}
}

// classify finds the remote address of a connection and whether it is in
// a trusted network. A connection without an IP address (a Unix socket)
// is local, hence trusted.
func (l *Listener) classify(remote net.Addr) (netip.Addr, bool) {
	var addr netip.Addr
	switch a := remote.(type) {
	case *net.TCPAddr:
		addr, _ = netip.AddrFromSlice(a.IP)
	default:
		if ap, err := netip.ParseAddrPort(remote.String()); err == nil {
			addr = ap.Addr()
		}
	}
	if !addr.IsValid() {
		return addr, true
	}
	addr = addr.Unmap()
	for _, p := range l.limits.Trusted {
		if p.Contains(addr) {
			return addr, true
		}
	}
	return addr, false
}

// Block is what one remote address counts as in the limits per address:
// an IPv4 address alone (/32), and an IPv6 address's /64, the block one
// host or site is given (RFC 6177), so that a client with a /64 cannot
// take 2^64 addresses' worth of slots. An IPv4-mapped IPv6 address is its
// IPv4 address.
func Block(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	if addr.Is6() {
		p, _ := addr.WithZone("").Prefix(64)
		return p
	}
	return netip.PrefixFrom(addr, addr.BitLen())
}

// admit takes a slot for a connection from addr, or says which limit
// refuses it, and its flag.
func (l *Listener) admit(addr netip.Addr, trusted bool) (why, flag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	block := Block(addr)
	switch {
	case !trusted && l.limits.PerAddress > 0 && l.byAddr[block] >= l.limits.PerAddress:
		return fmt.Sprintf("the address's block %s has %d connections open, the limit per address (%s; an IPv6 address counts as its /64)",
			block, l.byAddr[block], l.limits.PerAddressFlag), l.limits.PerAddressFlag
	case trusted && l.open >= l.limits.Total+l.limits.Reserved:
		return fmt.Sprintf("%d connections are open: the total (%s) and the reserve of trusted networks (%s) are taken",
			l.open, l.limits.TotalFlag, l.limits.ReservedFlag), l.limits.ReservedFlag
	case !trusted && l.open >= l.limits.Total:
		return fmt.Sprintf("%d connections are open, the total (%s); the reserve beyond it (%s) is for trusted networks",
			l.open, l.limits.TotalFlag, l.limits.ReservedFlag), l.limits.TotalFlag
	}
	l.open++
	if !trusted {
		l.byAddr[block]++
	}
	return "", ""
}

func (l *Listener) release(addr netip.Addr, trusted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if trusted {
		return
	}
	block := Block(addr)
	if l.byAddr[block]--; l.byAddr[block] <= 0 {
		delete(l.byAddr, block)
	}
}

// refuse closes c at once, with a reset rather than an orderly close (the
// server keeps no TIME_WAIT socket per refusal, and the client sees the
// refusal at once), and logs it unless a refusal was logged within the
// interval.
func (l *Listener) refuse(c net.Conn, addr netip.Addr, why, flag string) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
	l.refused.Add(1)
	if l.onRefuse != nil {
		l.onRefuse(flag)
	}
	l.mu.Lock()
	now := time.Now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < l.every {
		l.quiet++
		l.mu.Unlock()
		return
	}
	quiet := l.quiet
	l.lastLog, l.quiet = now, 0
	l.mu.Unlock()
	l.log.Warn("connection refused: over a limit", "addr", addr.String(), "reason", why,
		"total", l.limits.Total, "per_address", l.limits.PerAddress, "reserved", l.limits.Reserved,
		"refused_since_last_log", quiet)
}

// conn frees its slot when it is closed, once.
type conn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection when it can, as net/http does
// with a TCP connection before it closes one that had an error.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
