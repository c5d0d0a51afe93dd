package audit_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/audit"
)

// crashHelperEnv makes the test binary append to the log in its directory
// until it is killed (crashHelper), printing each acknowledged sequence.
const crashHelperEnv = "PAWL_AUDIT_CRASH_HELPER"

func crashHelper(dir string) {
	l, err := audit.OpenFile(filepath.Join(dir, audit.FileName))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	for g := range 8 {
		go func() {
			for i := g; ; i += 8 {
				r := record(i)
				r.Message = strings.Repeat("m", i%1000) // lines of many sizes, some crossing pages
				r, err := l.Append(context.Background(), r)
				mu.Lock()
				if err != nil {
					fmt.Fprintln(out, "error", err)
				} else {
					fmt.Fprintln(out, "ack", r.Sequence)
				}
				_ = out.Flush()
				mu.Unlock()
			}
		}()
	}
	select {} // until killed
}

// TestFileSurvivesKill kills a process in the middle of its appends: the
// log opens, its chain holds, and every acknowledged record is in it.
func TestFileSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 { // each round kills a process that continued the last one's chain
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		var acked int64
		for acks := 0; acks < 300 && sc.Scan(); {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[0] != "ack" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("round %d: helper said %q", round, sc.Text())
			}
			seq, _ := strconv.ParseInt(f[1], 10, 64)
			acked, acks = max(acked, seq), acks+1
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred work runs
			t.Fatal(err)
		}
		_ = cmd.Wait()

		l, err := audit.OpenFile(filepath.Join(dir, audit.FileName))
		if err != nil {
			t.Fatalf("round %d: open after the kill: %v", round, err)
		}
		all := readAll(t, l)
		_ = l.Close()
		if int64(len(all)) < acked {
			t.Fatalf("round %d: %d records after the kill, and sequence %d was acknowledged", round, len(all), acked)
		}
		t.Logf("round %d: %d records, %d acknowledged", round, len(all), acked)
	}
}
