package wasmbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Toolchains: Debian's Rust (rustc, cargo and libstd-rust-dev-wasm32, under
// /usr/bin: a rustup toolchain earlier on PATH may lack the wasm32
// standard library), and AssemblyScript's compiler from the repository's
// node_modules (npm ci).
var (
	rustc = "/usr/bin/rustc"
	cargo = "/usr/bin/cargo"
)

// RustTarget is the target the Rust examples are built for: no WASI, no
// imports at all.
const RustTarget = "wasm32-unknown-unknown"

// BuildRust returns the module built from the Cargo package
// validators/examples/<name> (e.g. "routing-rust") with Debian's toolchain,
// as `task validators` builds it. The package's name is the directory's. Without the toolchain it skips the test,
// unless CI=true: there a missing toolchain fails.
func BuildRust(tb testing.TB, name string) []byte {
	tb.Helper()
	need(tb, "Rust (apt-get install rustc cargo libstd-rust-dev-wasm32)", rustc, cargo, "/usr/lib/rustlib/"+RustTarget)
	return buildWith(tb, "rust:"+name, func(out string) *exec.Cmd {
		cmd := exec.Command(cargo, "build", "--offline", "--quiet", "--release", "--target", RustTarget)
		cmd.Dir = filepath.Join(Examples(), name)
		cmd.Env = append(os.Environ(), "RUSTC="+rustc, "CARGO_TARGET_DIR="+cargoTarget())
		return cmd
	}, func() string {
		return filepath.Join(cargoTarget(), RustTarget, "release", strings.ReplaceAll(name, "-", "_")+".wasm")
	})
}

// BuildAssemblyScript returns the module built from the AssemblyScript
// project validators/examples/<name> (e.g. "routing-as") with the asc of
// the repository's node_modules, as `task validators` builds it. Without
// it (no `npm ci`) it skips the test, unless CI=true.
func BuildAssemblyScript(tb testing.TB, name string) []byte {
	tb.Helper()
	asc := filepath.Join(Examples(), "..", "..", "node_modules", ".bin", "asc")
	need(tb, "AssemblyScript (npm ci)", asc)
	var out string
	return buildWith(tb, "as:"+name, func(o string) *exec.Cmd {
		out = o
		cmd := exec.Command(asc, "assembly/index.ts", "--config", "asconfig.json", "--target", "release", "--outFile", out)
		cmd.Dir = filepath.Join(Examples(), name)
		return cmd
	}, func() string { return out })
}

// cargoTarget is Cargo's target directory for test builds, kept between
// runs (Cargo locks and rebuilds it incrementally), the user's own.
func cargoTarget() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("pawl-test-cargo-%d", os.Getuid()))
}

func need(tb testing.TB, what string, paths ...string) {
	tb.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") == "true" {
				tb.Fatalf("wasmbuild: %s is missing under CI: %v", what, err)
			}
			tb.Skipf("wasmbuild: %s is not installed: %v", what, err)
		}
	}
}

// buildWith runs the command cmd(out) once per test process for key and
// returns the bytes of the file result() names.
func buildWith(tb testing.TB, key string, cmd func(out string) *exec.Cmd, result func() string) []byte {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[key]; ok {
		return b
	}
	d := dirLocked()
	if d == "" {
		tb.Fatal("wasmbuild: no build directory")
	}
	c := cmd(filepath.Join(d, fmt.Sprintf("%d.wasm", len(built))))
	if msg, err := c.CombinedOutput(); err != nil {
		tb.Fatalf("wasmbuild: build %s: %v\n%s", key, err, msg)
	}
	b, err := os.ReadFile(result())
	if err != nil {
		tb.Fatalf("wasmbuild: build %s: %v", key, err)
	}
	built[key] = b
	return b
}

// dirLocked returns the build directory, making it if needed; the caller
// holds mu. It returns "" if it cannot be made.
func dirLocked() string {
	if dir == "" {
		d, err := os.MkdirTemp("", "pawl-wasm")
		if err != nil {
			return ""
		}
		dir = d
	}
	return dir
}
