// Package benchkit is what the benchmark commands under bench/ share:
// pawld started as its own process, its CPU and memory read from /proc
// and its Go heap from /metrics, the routing validator built from source,
// a SessionService client, percentiles, and the Markdown tables they
// print.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
)

// Pawld is a pawld process.
type Pawld struct {
	// URL is where it serves, http://127.0.0.1:PORT.
	URL string
	cmd *exec.Cmd
}

// StartPawld runs pawld (bin, or built from ./cmd/pawld when bin is
// empty) with its data in dir, on a free loopback port, with args added,
// and waits until it listens.
func StartPawld(ctx context.Context, bin, dir string, args ...string) (*Pawld, error) {
	if bin == "" {
		bin = filepath.Join(dir, "pawld")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pawld")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return nil, fmt.Errorf("build pawld: %w", err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cmd := exec.Command(bin, append([]string{"--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "warn"}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Pawld{URL: "http://" + addr, cmd: cmd}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("pawld did not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond) // a child process has no readiness event to await
	}
}

// Stop asks pawld to stop (SIGINT) and kills it after 30 seconds.
func (p *Pawld) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// Pid is pawld's process ID.
func (p *Pawld) Pid() int { return p.cmd.Process.Pid }

// CPU is a process's user and system CPU time so far.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// RSS is a process's resident memory in bytes.
func RSS(pid int) (int64, error) {
	r, err := Resident(pid)
	return r.Total, err
}

// ResidentSet is a process's resident memory, in bytes, from
// /proc/PID/status.
type ResidentSet struct {
	// Total is VmRSS.
	Total int64
	// Anon is RssAnon: the heap, stacks and other private memory.
	Anon int64
	// File is RssFile: pages of mapped files held in memory (bbolt's
	// data file, the binary), which the kernel may drop and read again.
	File int64
}

// Resident reads pid's resident set.
func Resident(pid int) (ResidentSet, error) {
	var r ResidentSet
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, err
	}
	fields := map[string]*int64{"VmRSS:": &r.Total, "RssAnon:": &r.Anon, "RssFile:": &r.File}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, "\t")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return r, fmt.Errorf("/proc/%d/status %s %w", pid, name, err)
		}
		*dst = kb << 10
		found = found || name == "VmRSS:"
	}
	if !found {
		return r, errors.New("no VmRSS")
	}
	return r, nil
}

// BuildValidator builds validators/examples/<name> to WebAssembly in dir
// and returns the module: with Go for wasip1, or with Cargo when name
// ends in "-rust".
func BuildValidator(ctx context.Context, dir, name string) ([]byte, error) {
	if strings.HasSuffix(name, "-rust") {
		return buildRustValidator(ctx, dir, name)
	}
	out := filepath.Join(dir, filepath.Base(name)+".wasm")
	build := exec.CommandContext(ctx, "go", "build", "-o", out, "-buildmode=c-shared", "./validators/examples/"+name)
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build the %s validator: %w", name, err)
	}
	return os.ReadFile(out)
}

// buildRustValidator builds the Cargo package validators/examples/<name>
// (e.g. "routing-rust") with Debian's toolchain, as `task validators`
// does, into dir.
func buildRustValidator(ctx context.Context, dir, name string) ([]byte, error) {
	const target = "wasm32-unknown-unknown"
	build := exec.CommandContext(ctx, "/usr/bin/cargo", "build", "--offline", "--quiet", "--release", "--target", target)
	build.Dir = filepath.Join("validators", "examples", name)
	build.Env = append(os.Environ(), "RUSTC=/usr/bin/rustc", "CARGO_TARGET_DIR="+filepath.Join(dir, "cargo"))
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build the %s validator (apt-get install rustc cargo libstd-rust-dev-wasm32): %w", name, err)
	}
	return os.ReadFile(filepath.Join(dir, "cargo", target, "release", strings.ReplaceAll(name, "-", "_")+".wasm"))
}

// Percentile is the p-th percentile (0..1) of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// Durations renders durations rounded to the millisecond, comma-separated.
func Durations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(parts, ", ")
}

// Table is a two-column Markdown table of measures; each row is also
// printed to stderr as it is added, prefixed with Name.
type Table struct {
	Name string
	rows [][2]string
}

// Add adds a row.
func (t *Table) Add(what, value string) {
	t.rows = append(t.rows, [2]string{what, value})
	fmt.Fprintf(os.Stderr, "%s: %s: %s\n", t.Name, what, value)
}

// Print writes the table.
func (t *Table) Print(w io.Writer) {
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "| --- | --- |")
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s | %s |\n", r[0], r[1])
	}
}

// Grid is a Markdown table of measures (rows) by setup (columns), filled
// in any order; each cell is also printed to stderr as it is set.
type Grid struct {
	// Name prefixes the lines printed to stderr.
	Name       string
	rows, cols []string
	cells      map[[2]string]string
}

// Set sets the cell of row and col.
func (g *Grid) Set(row, col, value string) {
	if g.cells == nil {
		g.cells = map[[2]string]string{}
	}
	if !slices.Contains(g.rows, row) {
		g.rows = append(g.rows, row)
	}
	if !slices.Contains(g.cols, col) {
		g.cols = append(g.cols, col)
	}
	g.cells[[2]string{row, col}] = value
	fmt.Fprintf(os.Stderr, "%s: %s: %s: %s\n", g.Name, col, row, value)
}

// Print writes the table.
func (g *Grid) Print(w io.Writer) {
	fmt.Fprintf(w, "| measure | %s |\n|---|%s\n", strings.Join(g.cols, " | "), strings.Repeat("---|", len(g.cols)))
	for _, r := range g.rows {
		cells := make([]string, len(g.cols))
		for i, c := range g.cols {
			cells[i] = g.cells[[2]string{r, c}]
		}
		fmt.Fprintf(w, "| %s | %s |\n", r, strings.Join(cells, " | "))
	}
}

// FreeAddr is a loopback address with a port free at the time of asking.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Memory is what a Go server process holds.
type Memory struct {
	// RSS is the resident set (VmRSS), in bytes.
	RSS int64
	// Resident is the resident set, with its anonymous and file-backed
	// parts.
	Resident ResidentSet
	// HeapInuse is the Go heap's in-use spans (go_memstats_heap_inuse_bytes)
	// after a garbage collection, in bytes.
	HeapInuse int64
	// StackInuse is the goroutine stacks (go_memstats_stack_inuse_bytes).
	StackInuse int64
	// Goroutines is go_goroutines.
	Goroutines int64
}

// ReadMemory reads pid's resident set and, from the server's /metrics at
// apiURL, its Go heap, stacks and goroutines, after forcing a garbage
// collection through its profile endpoint at pprofURL (pawld --pprof).
func ReadMemory(ctx context.Context, pid int, apiURL, pprofURL string) (Memory, error) {
	var m Memory
	if _, err := get(ctx, pprofURL+"/debug/pprof/heap?gc=1"); err != nil {
		return m, err
	}
	metrics, err := get(ctx, apiURL+"/metrics")
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(metrics), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		dst := map[string]*int64{"go_memstats_heap_inuse_bytes": &m.HeapInuse, "go_memstats_stack_inuse_bytes": &m.StackInuse, "go_goroutines": &m.Goroutines}[name]
		if dst != nil {
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return m, fmt.Errorf("/metrics %s: %w", name, err)
			}
			*dst = int64(f)
		}
	}
	m.Resident, err = Resident(pid)
	m.RSS = m.Resident.Total
	return m, err
}

func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, err
}

// SaveProfile fetches a profile from url (a pprof endpoint) into file,
// creating its directory.
func SaveProfile(ctx context.Context, url, file string) error {
	body, err := get(ctx, url)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// Parallel runs fn on items 0 to n-1 with the given number of workers,
// and returns the first error.
func Parallel(workers, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// UploadValidator builds validators/examples/<name> in dir, uploads it to
// the server at url, and returns its digest.
func UploadValidator(ctx context.Context, client connect.HTTPClient, url, dir, name string) (string, error) {
	wasm, err := BuildValidator(ctx, dir, name)
	if err != nil {
		return "", err
	}
	resp, err := pawlv1connect.NewValidatorServiceClient(client, url, connect.WithGRPC()).Upload(ctx,
		connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm, Name: name}))
	if err != nil {
		return "", fmt.Errorf("upload the %s validator: %w", name, err)
	}
	return resp.Msg.GetValidator().GetDigest(), nil
}
