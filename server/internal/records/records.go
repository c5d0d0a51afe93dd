// Package records is the layout of Pawl's own key space, under
// store.SystemPrefix ("/_pawl/"): the key of every system record, and the
// one codec they are stored with. The record types belong to the domain
// packages that own them (release, instance, rollout); golden files in this
// package's tests pin each type's stored form, so that a change to a type
// that would change what is on disk fails a test first.
//
// The layout, for config C, generation G (20 digits, zero-padded, so that
// key order is generation order), instance ID and idempotency key KEY:
//
//	index/configs/C                 C has releases (empty value)
//	configs/C/head                  C's newest generation, as decimal
//	configs/C/releases/G            a release (release.Release)
//	configs/C/active                C's active pointer (rollout.Pointer)
//	configs/C/receipts/KEY          a pointer move (rollout.Receipt), or a lookup's fence (rollout.Fence)
//	configs/C/progress/G            the stages of G's rollout that passed (rollout.Progress)
//	configs/C/stops/G               G's stopped rollout (rollout.Stop)
//	configs/C/retired/G/ID          ID retired from G's membership (rollout.Retirement)
//	configs/C/revoked/G             G revoked: never promoted (rollout.Revocation)
//	acks/C/G/ID/NANOS               an ACK, by arrival (rollout.Ack)
//	applied/C/ID                    what ID last reported running (rollout.AppliedRecord)
//	evidence/C/G/ID                 member ID's quorum state for G (rollout.MemberEvidence)
//	instances/ID                    ID's registration (instance.Record)
//
// Assignment streams follow ConfigsPrefix: every record under it can change
// what an instance must run, and nothing else is there.
package records

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/pawlcfg/pawl/server/internal/store"
)

const (
	// ConfigsPrefix holds every record that can change an assignment.
	ConfigsPrefix = store.SystemPrefix + "configs/"
	// IndexPrefix lists every config that has a release, one key each.
	IndexPrefix = store.SystemPrefix + "index/configs/"
	// InstancesPrefix holds the registrations.
	InstancesPrefix = store.SystemPrefix + "instances/"
	// AcksPrefix holds every ACK.
	AcksPrefix = store.SystemPrefix + "acks/"
	// AppliedPrefix holds every applied record.
	AppliedPrefix = store.SystemPrefix + "applied/"
	// EvidencePrefix holds, per release and member, what Promote decides
	// on of the member's reports: rewritten only when that changes, so
	// reports that change nothing invalidate no promotion.
	EvidencePrefix = store.SystemPrefix + "evidence/"
)

// ReportPrefixes hold the records a fleet's reports write in bulk (ACKs,
// applied records, evidence): the rollout views follow them live, and no
// watcher or assignment stream resumes from them, so they do not count
// toward the change log's retention.
var ReportPrefixes = []string{AcksPrefix, AppliedPrefix, EvidencePrefix}

func gen(g int64) string { return fmt.Sprintf("%020d", g) }

func config(c, rest string) string { return ConfigsPrefix + c + "/" + rest }

// ParseGeneration reads a generation as keys write it (20 digits).
func ParseGeneration(s string) (int64, error) {
	g, err := strconv.ParseInt(s, 10, 64)
	if err != nil || g <= 0 {
		return 0, fmt.Errorf("records: %q is not a generation", s)
	}
	return g, nil
}

// HeadGeneration reads the value of a Head key.
func HeadGeneration(value []byte) (int64, error) {
	g, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("records: head %q is not a generation: %w", value, err)
	}
	return g, nil
}

// Index is the key that says config c has releases.
func Index(c string) string { return IndexPrefix + c }

// Head is the key of config c's newest generation.
func Head(c string) string { return config(c, "head") }

// Release is the key of generation g of config c.
func Release(c string, g int64) string { return config(c, "releases/"+gen(g)) }

// Releases is the prefix of every release of config c.
func Releases(c string) string { return config(c, "releases/") }

// Pointer is the key of config c's active pointer.
func Pointer(c string) string { return config(c, "active") }

// Receipt is the key of the receipt written under an idempotency key.
func Receipt(c, key string) string { return config(c, "receipts/"+key) }

// Receipts is the prefix of every receipt of config c.
func Receipts(c string) string { return config(c, "receipts/") }

// Progress is the key of the progress record of generation g's rollout.
func Progress(c string, g int64) string { return config(c, "progress/"+gen(g)) }

// Stop is the key of the stop record of generation g's rollout.
func Stop(c string, g int64) string { return config(c, "stops/"+gen(g)) }

// Stops is the prefix of every stop record of config c.
func Stops(c string) string { return config(c, "stops/") }

// StopGeneration reads the generation from a key under Stops.
func StopGeneration(c, key string) (int64, error) {
	g, err := strconv.ParseInt(strings.TrimPrefix(key, Stops(c)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("records: stop record key %s: %w", key, err)
	}
	return g, nil
}

// Revoked is the revocation record of generation g of config c.
func Revoked(c string, g int64) string { return config(c, "revoked/"+gen(g)) }

// Revocations is the prefix of config c's revocation records.
func Revocations(c string) string { return config(c, "revoked/") }

// RevokedGeneration is the generation of a revocation record's key.
func RevokedGeneration(c, key string) (int64, error) {
	return ParseGeneration(strings.TrimPrefix(key, Revocations(c)))
}

// Retired is the key of instance id's retirement from generation g.
func Retired(c string, g int64, id string) string { return RetiredOf(c, g) + id }

// RetiredOf is the prefix of every retirement from generation g.
func RetiredOf(c string, g int64) string { return config(c, "retired/"+gen(g)+"/") }

// Acks is the prefix of every ACK of generation g of config c.
func Acks(c string, g int64) string { return AcksPrefix + c + "/" + gen(g) + "/" }

// AcksOf is the prefix of instance id's ACKs of generation g.
func AcksOf(c string, g int64, id string) string { return Acks(c, g) + id + "/" }

// EvidenceOf is the prefix of the evidence records of generation g.
func EvidenceOf(c string, g int64) string { return EvidencePrefix + c + "/" + gen(g) + "/" }

// Evidence is the key of member id's evidence record of generation g.
func Evidence(c string, g int64, id string) string { return EvidenceOf(c, g) + id }

// Ack is the key of an ACK of id that arrived at the nanosecond nanos (the
// keys of one instance sort in arrival order).
func Ack(c string, g int64, id string, nanos int64) string {
	return AcksOf(c, g, id) + fmt.Sprintf("%020d", nanos)
}

// ParseAck reads an ACK's key: its config, generation, instance and
// arrival nanosecond.
func ParseAck(key string) (c string, g int64, id string, nanos int64, err error) {
	rest, ok := strings.CutPrefix(key, AcksPrefix)
	c, rest, ok2 := strings.Cut(rest, "/")
	gs, rest, ok3 := strings.Cut(rest, "/")
	i := strings.LastIndexByte(rest, '/')
	if !ok || !ok2 || !ok3 || i <= 0 {
		return "", 0, "", 0, fmt.Errorf("records: %s is not an ACK's key", key)
	}
	if g, err = strconv.ParseInt(gs, 10, 64); err != nil {
		return "", 0, "", 0, fmt.Errorf("records: ACK key %s: %w", key, err)
	}
	if nanos, err = AckArrival(key); err != nil {
		return "", 0, "", 0, err
	}
	return c, g, rest[:i], nanos, nil
}

// AckArrival reads the arrival nanosecond from an ACK's key.
func AckArrival(key string) (int64, error) {
	n, err := strconv.ParseInt(key[strings.LastIndexByte(key, '/')+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("records: ACK key %s: %w", key, err)
	}
	return n, nil
}

// Applied is the key of what instance id last reported running of config c.
func Applied(c, id string) string { return AppliedOf(c) + id }

// AppliedOf is the prefix of every applied record of config c.
func AppliedOf(c string) string { return AppliedPrefix + c + "/" }

// Instance is the key of instance id's registration.
func Instance(id string) string { return InstancesPrefix + id }

// Encode is the stored form of a record: JSON.
func Encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("records: encode %T: %w", v, err)
	}
	return b, nil
}

// Decode reads the record stored at kv into v; the error names the key.
func Decode(kv store.KeyValue, v any) error {
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return fmt.Errorf("records: %s: %w", kv.Key, err)
	}
	return nil
}
