package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/grpcreflect"

	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/auth"
)

// Scope is where a permit's role must hold, found in the request.
type Scope int

const (
	// Everywhere: the role, whatever its scope.
	Everywhere Scope = iota
	// Key: the request's key.
	Key
	// TxnKeys: every key a transaction changes; a reader's grant suffices
	// for the keys it only compares.
	TxnKeys
	// Prefix: some key under the request's prefix; what is returned is
	// only the keys the caller may read.
	Prefix
	// Config: the request's config ID.
	Config
	// Identity: the workload identity the request speaks for.
	Identity
	// Registered: Identity, whose current registration the caller made.
	Registered
	// Assigned: Identity, which is assigned what the request downloads.
	Assigned
)

// scopeDocs say what each scope means, in the docs' role table.
var scopeDocs = map[Scope]string{
	Everywhere: "",
	Key:        "the key",
	TxnKeys:    "every key it changes; reader of every key it compares",
	Prefix:     "the prefix; only readable keys are returned",
	Config:     "the config",
	Identity:   "the identity",
	Registered: "the identity, registered by the caller",
	Assigned:   "an identity assigned what it downloads",
}

// Permit is one way to be allowed a procedure: a role, holding where the
// scope says.
type Permit struct {
	Role  auth.Role
	Scope Scope
}

// RoleTable is who may call each procedure: any one of its permits
// suffices; an admin may call every procedure, and nothing else is
// allowed. Keys under /_pawl/ are an admin's alone. Non-admins see no boot
// IDs or membership epochs of instances but their own (ListInstances,
// GetRolloutStatus and ListApplied leave them out). docs/AUTH.md shows
// this table; a test checks that the two agree.
var RoleTable = map[string][]Permit{
	pawlv1connect.KVServicePutProcedure:    {{auth.Writer, Key}},
	pawlv1connect.KVServiceGetProcedure:    {{auth.Reader, Key}, {auth.Writer, Key}},
	pawlv1connect.KVServiceDeleteProcedure: {{auth.Writer, Key}},
	pawlv1connect.KVServiceTxnProcedure:    {{auth.Writer, TxnKeys}},
	pawlv1connect.KVServiceListProcedure:   {{auth.Reader, Prefix}, {auth.Writer, Prefix}},
	pawlv1connect.KVServiceWatchProcedure:  {{auth.Reader, Prefix}, {auth.Writer, Prefix}},

	pawlv1connect.ValidatorServiceUploadProcedure:         {{auth.ValidatorPublisher, Everywhere}},
	pawlv1connect.ValidatorServiceGetValidatorProcedure:   {{auth.ValidatorPublisher, Everywhere}, {auth.Releaser, Everywhere}},
	pawlv1connect.ValidatorServiceListValidatorsProcedure: {{auth.ValidatorPublisher, Everywhere}, {auth.Releaser, Everywhere}},
	pawlv1connect.ValidatorServiceDownloadProcedure:       {{auth.ValidatorPublisher, Everywhere}, {auth.Releaser, Everywhere}, {auth.Instance, Assigned}},
	pawlv1connect.ValidatorServiceValidateProcedure:       {{auth.ValidatorPublisher, Everywhere}, {auth.Releaser, Everywhere}},

	pawlv1connect.ReleaseServiceCreateReleaseProcedure: {{auth.Releaser, Config}},
	pawlv1connect.ReleaseServiceGetReleaseProcedure:    {{auth.Releaser, Config}, {auth.Promoter, Config}, {auth.Instance, Assigned}},
	pawlv1connect.ReleaseServiceListReleasesProcedure:  {{auth.Releaser, Config}, {auth.Promoter, Config}},
	pawlv1connect.ReleaseServiceRetireMemberProcedure:  {{auth.Promoter, Config}},
	pawlv1connect.ReleaseServiceRevokeReleaseProcedure: {{auth.Promoter, Config}},

	pawlv1connect.InstanceServiceRegisterProcedure:         {{auth.Instance, Identity}},
	pawlv1connect.InstanceServiceHeartbeatProcedure:        {{auth.Instance, Registered}},
	pawlv1connect.InstanceServiceWatchAssignmentsProcedure: {{auth.Instance, Identity}},
	pawlv1connect.InstanceServiceListInstancesProcedure:    {{auth.Releaser, Everywhere}, {auth.Promoter, Everywhere}},

	// A session as its hello: the ACKs and watches it carries are
	// authorized one by one as RolloutService.Ack and KVService.Watch.
	pawlv1connect.SessionServiceSessionProcedure: {{auth.Instance, Identity}},

	pawlv1connect.RolloutServiceAckProcedure:              {{auth.Instance, Registered}},
	pawlv1connect.RolloutServiceGetRolloutStatusProcedure: {{auth.Releaser, Config}, {auth.Promoter, Config}},
	pawlv1connect.RolloutServicePromoteProcedure:          {{auth.Promoter, Config}},
	pawlv1connect.RolloutServiceRollbackProcedure:         {{auth.Promoter, Config}},
	pawlv1connect.RolloutServiceGetPromotionProcedure:     {{auth.Releaser, Config}, {auth.Promoter, Config}},
	pawlv1connect.RolloutServiceStopRolloutProcedure:      {{auth.Promoter, Config}},
	pawlv1connect.RolloutServiceGetPointerProcedure:       {{auth.Releaser, Config}, {auth.Promoter, Config}},
	pawlv1connect.RolloutServiceListAppliedProcedure:      {{auth.Releaser, Config}, {auth.Promoter, Config}},

	// The store's size and alarms: whoever releases or promotes, who must
	// know why writes are refused.
	pawlv1connect.MaintenanceServiceStatusProcedure: {{auth.Releaser, Everywhere}, {auth.Promoter, Everywhere}},

	// The audit log, and a copy of the whole store: an admin's alone.
	pawlv1connect.AuditServiceListAuditProcedure:      nil,
	pawlv1connect.MaintenanceServiceSnapshotProcedure: nil,
}

// AnyPrincipal are the procedures every authenticated principal may call,
// whatever its grants: gRPC server reflection, which describes the API
// (the same for every caller) and which tools such as grpcurl use. Without
// a credential they are Unauthenticated, as every other procedure; gRPC
// health checking alone needs none.
var AnyPrincipal = map[string]bool{
	"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo":      true,
	"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo": true,
}

// RoleTableMarkdown renders RoleTable as the Markdown table of
// docs/AUTH.md: a row per procedure, in service and procedure order, with
// each permit as "role (scope)".
func RoleTableMarkdown() string {
	var b strings.Builder
	b.WriteString("| procedure | allowed to (besides admin) |\n| --- | --- |\n")
	for _, proc := range slices.Sorted(maps.Keys(RoleTable)) {
		var permits []string
		for _, p := range RoleTable[proc] {
			s := "`" + string(p.Role) + "`"
			if doc := scopeDocs[p.Scope]; doc != "" {
				s += " (" + doc + ")"
			}
			permits = append(permits, s)
		}
		if len(permits) == 0 {
			permits = []string{"nobody: admin only"}
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", strings.TrimPrefix(proc, "/pawl.v1."), strings.Join(permits, ", or "))
	}
	return b.String()
}
