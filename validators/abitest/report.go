package abitest

import "github.com/pawlcfg/pawl/validators/host"

// Status is the outcome of a check.
type Status string

const (
	// Pass means the module keeps the check's promise.
	Pass Status = "pass"
	// Fail means it does not; Check.Detail says why.
	Fail Status = "fail"
	// Skip means the check could not run, because an earlier one failed.
	Skip Status = "skip"
)

// The names of Run's checks; a case's is CasePrefix and its name, a
// built-in input's InputPrefix and its name.
const (
	CheckSize         = "module size"
	CheckFormat       = "wasm format"
	CheckShape        = "module limits"
	CheckImports      = "imports"
	CheckExports      = "exports"
	CheckLoad         = "load"
	CheckVersion      = "abi version"
	CheckReuse        = "determinism: reused instance"
	CheckAfterFailure = "determinism: after a failed call"
	CheckIsolation    = "isolation: earlier calls"
	CheckTime         = "limits: time"
	CheckMemory       = "limits: memory"
	CheckOutput       = "limits: output"

	CasePrefix  = "case "
	InputPrefix = "input "
)

// Check is one promise of the ABI and whether the module keeps it.
type Check struct {
	// Name names the promise (one of the Check* constants, or a case's or
	// built-in input's name with its prefix).
	Name string `json:"name"`
	// Status is the outcome.
	Status Status `json:"status"`
	// Detail says why a check failed or was skipped, and what a passed
	// one measured.
	Detail string `json:"detail,omitempty"`
	// Result is the module's result on the input of a case or built-in
	// input, from a fresh instance; nil for other checks and failed calls.
	Result *host.Result `json:"result,omitempty"`
}

// Report is what Run found, check by check, in the order they ran.
type Report struct {
	// Digest is the module's content address, as an upload prints it.
	Digest string `json:"digest"`
	// Size is the module's size in bytes.
	Size int `json:"size"`
	// Checks are the checks, in the order they ran.
	Checks []Check `json:"checks"`
}

// OK reports whether no check failed.
func (r *Report) OK() bool {
	_, failed, _ := r.Counts()
	return failed == 0
}

// Counts returns how many checks passed, failed and were skipped.
func (r *Report) Counts() (passed, failed, skipped int) {
	for _, c := range r.Checks {
		switch c.Status {
		case Pass:
			passed++
		case Fail:
			failed++
		default:
			skipped++
		}
	}
	return passed, failed, skipped
}

// Find returns the check named name.
func (r *Report) Find(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func (r *Report) add(name string, status Status, detail string) {
	r.Checks = append(r.Checks, Check{Name: name, Status: status, Detail: detail})
}

func (r *Report) pass(name, detail string) { r.add(name, Pass, detail) }
func (r *Report) fail(name, detail string) { r.add(name, Fail, detail) }
func (r *Report) skip(reason string, names ...string) {
	for _, n := range names {
		r.add(n, Skip, reason)
	}
}
