package server_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/server/internal/api"
)

var updateDocs = flag.Bool("update", false, "rewrite the role table of docs/AUTH.md from the code's")

const (
	tableStart = "<!-- role table: generated from server/internal/api/roles.go; TestRoleTableDocs checks it (go test ./server -run TestRoleTableDocs -update rewrites it) -->\n"
	tableEnd   = "<!-- end of role table -->"
)

// TestRoleTableDocs checks that docs/AUTH.md shows the role table the
// code enforces.
func TestRoleTableDocs(t *testing.T) {
	const path = "../docs/AUTH.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start, end := strings.Index(doc, tableStart), strings.Index(doc, tableEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no role table markers", path)
	}
	want := api.RoleTableMarkdown()
	if got := doc[start+len(tableStart) : end]; got != want {
		if *updateDocs {
			if err := os.WriteFile(path, []byte(doc[:start+len(tableStart)]+want+doc[end:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("the role table of %s is not the code's (run go test ./server -run TestRoleTableDocs -update):\n%s", path, want)
	}
}

// docRoles reads the role table of docs/AUTH.md: for each procedure
// ("KVService/Put"), the roles allowed it besides admin.
func docRoles(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../docs/AUTH.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z]+/[A-Za-z]+)` \\| (.*) \\|$")
	role := regexp.MustCompile("`([a-z-]+)`")
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = []string{} // admin only, unless roles follow
		for _, r := range role.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], r[1])
		}
	}
	return out
}

// authRoles are the roles of the fixture's tokens, each scoped to /app/,
// config app or identities app-*.
var authRoles = []string{"reader", "writer", "validator-publisher", "releaser", "promoter", "instance", "admin"}

// authFixture is a server with an auth file holding a token per role.
type authFixture struct {
	t      *testing.T
	ctx    context.Context
	srv    *testserver.Server
	path   string
	tokens map[string]string // by role (and principal name)
	hashes map[string]string
}

func scopeOf(role string) string {
	switch role {
	case "reader", "writer":
		return `prefixes: ["/app/"]`
	case "releaser", "promoter":
		return `configs: ["app"]`
	case "instance":
		return `identities: ["app-*"]`
	}
	return ""
}

// authYAML is an auth file granting each principal its role (named like
// it, or principal: role for more).
func (f *authFixture) authYAML(principals ...string) string {
	var b strings.Builder
	b.WriteString("tokens:\n")
	for _, p := range principals {
		name, role, ok := strings.Cut(p, ":")
		if !ok {
			role = name
		}
		if _, ok := f.tokens[name]; !ok {
			f.tokens[name], f.hashes[name] = testserver.NewToken(f.t)
		}
		fmt.Fprintf(&b, "  - principal: %s\n    hash: %s\n    grants:\n      - role: %s\n", name, f.hashes[name], role)
		if s := scopeOf(role); s != "" {
			fmt.Fprintf(&b, "        %s\n", s)
		}
	}
	return b.String()
}

func newAuthFixture(t *testing.T, opts ...server.Option) *authFixture {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &authFixture{t: t, ctx: ctx, tokens: map[string]string{}, hashes: map[string]string{}}
	f.path = testserver.WriteAuthFile(t, f.authYAML(append(slices.Clone(authRoles), "other-instance:instance")...))
	f.srv = testserver.Start(t, append([]server.Option{server.WithAuthFile(f.path)}, opts...)...)
	return f
}

// clients are a caller's clients of the eight services.
type clients struct {
	au  pawlv1connect.AuditServiceClient
	mt  pawlv1connect.MaintenanceServiceClient
	kv  pawlv1connect.KVServiceClient
	vs  pawlv1connect.ValidatorServiceClient
	rs  pawlv1connect.ReleaseServiceClient
	is  pawlv1connect.InstanceServiceClient
	ro  pawlv1connect.RolloutServiceClient
	ss  pawlv1connect.SessionServiceClient
	ctx context.Context
}

// as returns the clients of the principal (no token for "").
func (f *authFixture) as(principal string) clients {
	client := testserver.HTTPClient(f.t)
	if principal != "" {
		client = testserver.BearerClient(f.t, f.tokens[principal])
	}
	return clients{
		kv: pawlv1connect.NewKVServiceClient(client, f.srv.URL), vs: pawlv1connect.NewValidatorServiceClient(client, f.srv.URL),
		rs: pawlv1connect.NewReleaseServiceClient(client, f.srv.URL), is: pawlv1connect.NewInstanceServiceClient(client, f.srv.URL),
		ro: pawlv1connect.NewRolloutServiceClient(client, f.srv.URL, connect.WithGRPC()), ctx: f.ctx,
		au: pawlv1connect.NewAuditServiceClient(client, f.srv.URL),
		mt: pawlv1connect.NewMaintenanceServiceClient(client, f.srv.URL),
		ss: pawlv1connect.NewSessionServiceClient(client, f.srv.URL, connect.WithGRPC()),
	}
}

// register registers id (boot "b1") as the principal and returns its record.
func (c clients) register(id, boot string) (*pawlv1.InstanceRecord, error) {
	resp, err := c.is.Register(c.ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: id, BootId: boot, Zone: "z", TrafficWeight: 1,
	}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetRecord(), nil
}

func routingSpec(config, digest string, weight int) *pawlv1.ReleaseSpec {
	return &pawlv1.ReleaseSpec{
		ConfigId: config, MediaType: "application/json", ValidatorDigest: digest,
		Content:  []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)),
		Stages:   []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
		Deadline: durationpb.New(time.Hour),
	}
}

// setup uploads the routing validator, registers app-1 as the instance
// principal and creates release app/1, which app-1 is assigned.
func (f *authFixture) setup() (digest string, rel *pawlv1.Release, rec *pawlv1.InstanceRecord) {
	f.t.Helper()
	admin := f.as("admin")
	up, err := admin.vs.Upload(f.ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(f.t, "routing"), Name: "routing"}))
	if err != nil {
		f.t.Fatal(err)
	}
	digest = up.Msg.GetValidator().GetDigest()
	if rec, err = f.as("instance").register("app-1", "b1"); err != nil {
		f.t.Fatal(err)
	}
	resp, err := f.as("releaser").rs.CreateRelease(f.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: routingSpec("app", digest, 10)}))
	if err != nil {
		f.t.Fatal(err)
	}
	return digest, resp.Msg.GetRelease(), rec
}

// firstOf opens a server stream and reads its first message.
func firstOf[T any](s *connect.ServerStreamForClient[T], err error) error {
	if err != nil {
		return err
	}
	defer s.Close()
	if !s.Receive() {
		return s.Err()
	}
	return nil
}

// TestEveryRPCAgainstEveryRole calls every procedure of the eight services
// as every role (and with no token), on requests inside each role's scope,
// and checks that it is allowed (any outcome but UNAUTHENTICATED and
// PERMISSION_DENIED) exactly when docs/AUTH.md says so.
func TestEveryRPCAgainstEveryRole(t *testing.T) {
	f := newAuthFixture(t)
	digest, rel, _ := f.setup()
	gen := rel.GetGeneration()
	calls := map[string]func(c clients, role string) error{
		"KVService/Put": func(c clients, _ string) error {
			_, err := c.kv.Put(c.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/app/k", Value: []byte("v")}))
			return err
		},
		"KVService/Get": func(c clients, _ string) error {
			_, err := c.kv.Get(c.ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/app/k"}))
			return err
		},
		"KVService/Delete": func(c clients, _ string) error {
			_, err := c.kv.Delete(c.ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: "/app/gone"}))
			return err
		},
		"KVService/Txn": func(c clients, _ string) error {
			_, err := c.kv.Txn(c.ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/app/t", Value: []byte("v")}},
				Compares: []*pawlv1.TxnCompare{{Key: "/app/k", ModRevision: 0}}}))
			return err
		},
		"KVService/List": func(c clients, _ string) error {
			_, err := c.kv.List(c.ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/app/"}))
			return err
		},
		"KVService/Watch": func(c clients, _ string) error {
			return firstOf(c.kv.Watch(c.ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/app/"})))
		},
		"ValidatorService/Upload": func(c clients, _ string) error {
			_, err := c.vs.Upload(c.ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, "routing")}))
			return err
		},
		"ValidatorService/GetValidator": func(c clients, _ string) error {
			_, err := c.vs.GetValidator(c.ctx, connect.NewRequest(&pawlv1.GetValidatorRequest{Digest: digest}))
			return err
		},
		"ValidatorService/ListValidators": func(c clients, _ string) error {
			_, err := c.vs.ListValidators(c.ctx, connect.NewRequest(&pawlv1.ListValidatorsRequest{}))
			return err
		},
		"ValidatorService/Download": func(c clients, _ string) error {
			return firstOf(c.vs.Download(c.ctx, connect.NewRequest(&pawlv1.DownloadRequest{Digest: digest, WorkloadIdentity: "app-1"})))
		},
		"ValidatorService/Validate": func(c clients, _ string) error {
			_, err := c.vs.Validate(c.ctx, connect.NewRequest(&pawlv1.ValidateRequest{Digest: digest, Content: []byte(`{}`), MediaType: "application/json"}))
			return err
		},
		"ReleaseService/CreateRelease": func(c clients, _ string) error {
			spec := routingSpec("app", digest, 20)
			spec.Stages = nil // refused as malformed once allowed: the release stays the newest
			_, err := c.rs.CreateRelease(c.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
			return err
		},
		"ReleaseService/GetRelease": func(c clients, _ string) error {
			_, err := c.rs.GetRelease(c.ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "app", Generation: gen, WorkloadIdentity: "app-1"}))
			return err
		},
		"ReleaseService/ListReleases": func(c clients, _ string) error {
			_, err := c.rs.ListReleases(c.ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "app"}))
			return err
		},
		"ReleaseService/RetireMember": func(c clients, _ string) error {
			_, err := c.rs.RetireMember(c.ctx, connect.NewRequest(&pawlv1.RetireMemberRequest{ConfigId: "app", Generation: 99, WorkloadIdentity: "app-1", Reason: "r"}))
			return err
		},
		"ReleaseService/RevokeRelease": func(c clients, _ string) error {
			_, err := c.rs.RevokeRelease(c.ctx, connect.NewRequest(&pawlv1.RevokeReleaseRequest{ConfigId: "app", Generation: 99, Reason: "r"}))
			return err
		},
		"InstanceService/Register": func(c clients, role string) error {
			_, err := c.register("app-reg-"+role, "b1") // an identity of its own: no takeover
			return err
		},
		"InstanceService/Heartbeat": func(c clients, _ string) error {
			_, err := c.is.Heartbeat(c.ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: "app-1", BootId: "b1"}))
			return err
		},
		"InstanceService/WatchAssignments": func(c clients, _ string) error {
			return firstOf(c.is.WatchAssignments(c.ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "app-1"})))
		},
		"SessionService/Session": func(c clients, role string) error {
			s := c.ss.Session(c.ctx)
			defer func() { _ = s.CloseRequest(); _ = s.CloseResponse() }()
			hello := &pawlv1.SessionHello{Instance: &pawlv1.Instance{WorkloadIdentity: "app-sess-" + role, BootId: "b1", Zone: "z", TrafficWeight: 1}}
			if err := s.Send(&pawlv1.SessionRequest{Kind: &pawlv1.SessionRequest_Hello{Hello: hello}}); err != nil {
				return err
			}
			_, err := s.Receive()
			return err
		},
		"InstanceService/ListInstances": func(c clients, _ string) error {
			_, err := c.is.ListInstances(c.ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
			return err
		},
		"RolloutService/Ack": func(c clients, _ string) error {
			_, err := c.ro.Ack(c.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "app", Generation: gen, WorkloadIdentity: "app-1",
				BootId: "b1", MembershipEpoch: 1, ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_DISCOVERED}}))
			return err
		},
		"RolloutService/GetRolloutStatus": func(c clients, _ string) error {
			_, err := c.ro.GetRolloutStatus(c.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "app", Generation: gen}))
			return err
		},
		"RolloutService/Promote": func(c clients, _ string) error {
			_, err := c.ro.Promote(c.ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "app", Generation: 99, IdempotencyKey: "k"}))
			return err
		},
		"RolloutService/Rollback": func(c clients, _ string) error {
			_, err := c.ro.Rollback(c.ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "app", IdempotencyKey: "k2"}))
			return err
		},
		"RolloutService/GetPromotion": func(c clients, _ string) error {
			_, err := c.ro.GetPromotion(c.ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "app", IdempotencyKey: "none"}))
			return err
		},
		"RolloutService/StopRollout": func(c clients, _ string) error {
			_, err := c.ro.StopRollout(c.ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "app", Generation: 99, Reason: "r"}))
			return err
		},
		"RolloutService/GetPointer": func(c clients, _ string) error {
			_, err := c.ro.GetPointer(c.ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "app"}))
			return err
		},
		"RolloutService/ListApplied": func(c clients, _ string) error {
			_, err := c.ro.ListApplied(c.ctx, connect.NewRequest(&pawlv1.ListAppliedRequest{ConfigId: "app"}))
			return err
		},
		"MaintenanceService/Status": func(c clients, _ string) error {
			_, err := c.mt.Status(c.ctx, connect.NewRequest(&pawlv1.StatusRequest{}))
			return err
		},
		"MaintenanceService/Snapshot": func(c clients, _ string) error {
			return firstOf(c.mt.Snapshot(c.ctx, connect.NewRequest(&pawlv1.SnapshotRequest{})))
		},
		"AuditService/ListAudit": func(c clients, _ string) error {
			_, err := c.au.ListAudit(c.ctx, connect.NewRequest(&pawlv1.ListAuditRequest{}))
			return err
		},
	}
	docs := docRoles(t)
	for proc := range api.RoleTable {
		if calls[strings.TrimPrefix(proc, "/pawl.v1.")] == nil {
			t.Errorf("no call of %s in the table test", proc)
		}
	}
	if len(docs) != len(calls) {
		t.Errorf("docs/AUTH.md lists %d procedures, the test calls %d", len(docs), len(calls))
	}
	for _, proc := range slices.Sorted(maps.Keys(calls)) {
		for _, role := range append(slices.Clone(authRoles), "") {
			t.Run(proc+"/"+cmp(role, "no-token"), func(t *testing.T) {
				err := calls[proc](f.as(role), role)
				code := connect.CodeOf(err)
				refused := code == connect.CodePermissionDenied || code == connect.CodeUnauthenticated
				switch {
				case role == "" && code != connect.CodeUnauthenticated:
					t.Errorf("without a token: %v, want UNAUTHENTICATED", err)
				case role == "":
				case (role == "admin" || slices.Contains(docs[proc], role)) == refused:
					t.Errorf("as %s: %v; docs/AUTH.md allows %v", role, err, docs[proc])
				}
			})
		}
	}
}

func cmp(s, ifEmpty string) string {
	if s == "" {
		return ifEmpty
	}
	return s
}

// wantCode checks err's code and that its message holds every part.
func wantCode(t *testing.T, what string, err error, code connect.Code, parts ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not say %q", what, err, p)
		}
	}
}

// TestUnauthenticatedAndPermissionDenied: a missing, malformed, unknown or
// expired token is UNAUTHENTICATED, saying which and never the token; a
// valid token without the grant is PERMISSION_DENIED naming the role and
// scope needed, the same whether the key exists or not, and nothing
// changes.
func TestUnauthenticatedAndPermissionDenied(t *testing.T) {
	f := &authFixture{t: t, ctx: context.Background(), tokens: map[string]string{}, hashes: map[string]string{}}
	body := f.authYAML("writer", "reader")
	root, rootHash := testserver.NewToken(t)
	body += fmt.Sprintf("  - principal: root-reader\n    hash: %s\n    grants: [{role: reader, prefixes: [\"/\"]}]\n", rootHash)
	expired, expiredHash := testserver.NewToken(t)
	body += fmt.Sprintf("  - principal: old\n    hash: %s\n    expires: 2020-01-01T00:00:00Z\n    grants:\n      - role: admin\n", expiredHash)
	f.path = testserver.WriteAuthFile(t, body)
	f.srv = testserver.Start(t, server.WithAuthFile(f.path))
	unknown, _ := testserver.NewToken(t)
	put := func(client pawlv1connect.KVServiceClient, key string) error {
		_, err := client.Put(f.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")}))
		return err
	}
	kvAs := func(token string) pawlv1connect.KVServiceClient {
		return pawlv1connect.NewKVServiceClient(testserver.BearerClient(t, token), f.srv.URL)
	}
	wantCode(t, "no token", put(pawlv1connect.NewKVServiceClient(testserver.HTTPClient(t), f.srv.URL), "/app/a"), connect.CodeUnauthenticated, "no credential")
	wantCode(t, "malformed token", put(kvAs("secret-password"), "/app/a"), connect.CodeUnauthenticated, "malformed")
	err := put(kvAs(unknown), "/app/a")
	wantCode(t, "unknown token", err, connect.CodeUnauthenticated, "not in the server's auth file")
	if strings.Contains(err.Error(), unknown) {
		t.Errorf("the refusal repeats the token: %v", err)
	}
	err = put(kvAs(expired), "/app/a")
	wantCode(t, "expired token", err, connect.CodeUnauthenticated, "expired at 2020-01-01T00:00:00Z")
	if strings.Contains(err.Error(), expired) {
		t.Errorf("the refusal repeats the token: %v", err)
	}

	writer, reader := kvAs(f.tokens["writer"]), kvAs(f.tokens["reader"])
	if err := put(writer, "/app/exists"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "reader puts", put(reader, "/app/a"), connect.CodePermissionDenied, "role writer", `"/app/a"`, `"reader"`)
	wantCode(t, "writer outside its prefix", put(writer, "/other/a"), connect.CodePermissionDenied, `role writer on key "/other/a"`)
	// The refusal of a key the caller may not read is the same whether it
	// exists or not.
	get := func(key string) error {
		_, err := reader.Get(f.ctx, connect.NewRequest(&pawlv1.GetRequest{Key: key}))
		return err
	}
	if err := put(writer, "/app/x"); err != nil {
		t.Fatal(err)
	}
	e1, e2 := get("/other/exists"), get("/other/absent")
	wantCode(t, "read outside the grant", e1, connect.CodePermissionDenied)
	if strings.ReplaceAll(e1.Error(), "exists", "X") != strings.ReplaceAll(e2.Error(), "absent", "X") {
		t.Errorf("refusals differ for a key that exists and one that does not: %q, %q", e1, e2)
	}
	wantCode(t, "system records", get("/_pawl/configs/x"), connect.CodePermissionDenied, "role admin", "/_pawl/")
	_, err = kvAs(root).Get(f.ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/_pawl/configs/x"}))
	wantCode(t, "system records for a reader of /", err, connect.CodePermissionDenied, "role admin", "/_pawl/")
	// Nothing changed.
	resp, err := reader.List(f.ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/app/"}))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Msg.GetKvs() {
		keys = append(keys, kv.GetKey())
	}
	if !slices.Equal(keys, []string{"/app/exists", "/app/x"}) {
		t.Errorf("keys after the refusals: %v", keys)
	}
}

// TestListAndWatchReturnOnlyReadableKeys: a reader of /app/ listing or
// watching / sees only /app/ keys (a watch batch of others becomes
// progress), and a prefix it can read nothing of is refused.
func TestListAndWatchReturnOnlyReadableKeys(t *testing.T) {
	f := newAuthFixture(t)
	admin, reader := f.as("admin"), f.as("reader")
	watch, err := reader.kv.Watch(f.ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/"}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if !watch.Receive() || watch.Msg().GetStarted() == nil {
		t.Fatalf("watch: %v", watch.Err())
	}
	for _, key := range []string{"/secret/a", "/app/a", "/secret/b"} {
		if _, err := admin.kv.Put(f.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")})); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	for len(seen) < 1 || !slices.Contains(seen, "progress@3") {
		if !watch.Receive() {
			t.Fatalf("watch: %v", watch.Err())
		}
		m := watch.Msg()
		for _, ev := range m.GetEvents().GetEvents() {
			seen = append(seen, ev.GetKv().GetKey())
		}
		if p := m.GetProgress(); p != nil {
			seen = append(seen, fmt.Sprintf("progress@%d", p.GetRevision()))
		}
	}
	if seen[0] != "progress@1" || !slices.Contains(seen, "/app/a") || slices.ContainsFunc(seen, func(k string) bool { return strings.HasPrefix(k, "/secret/") }) {
		t.Errorf("the reader of /app/ watched %v", seen)
	}
	resp, err := reader.kv.List(f.ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetKvs()) != 1 || resp.Msg.GetKvs()[0].GetKey() != "/app/a" {
		t.Errorf("the reader of /app/ listed %v", resp.Msg.GetKvs())
	}
	_, err = reader.kv.List(f.ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/secret/"}))
	wantCode(t, "list of /secret/", err, connect.CodePermissionDenied, `some key under "/secret/"`)
	err = firstOf(reader.kv.Watch(f.ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/_pawl/"})))
	wantCode(t, "watch of /_pawl/", err, connect.CodePermissionDenied)
}

// TestInstanceCredentialSpeaksOnlyForItself: an instance principal cannot
// register, heartbeat, ACK or download as an identity outside its grant
// or registered by another principal, cannot take over a live
// registration (the real instance keeps its membership), and sees no boot
// IDs of others.
func TestInstanceCredentialSpeaksOnlyForItself(t *testing.T) {
	f := newAuthFixture(t)
	digest, rel, rec := f.setup()
	inst, other := f.as("instance"), f.as("other-instance")

	// Outside the grant.
	_, err := inst.register("billing-1", "b1")
	wantCode(t, "register outside the grant", err, connect.CodePermissionDenied, `identity "billing-1"`)

	// Takeover of app-1 by another instance credential whose grant covers it.
	_, err = other.register("app-1", "evil-boot")
	wantCode(t, "takeover", err, connect.CodePermissionDenied, "app-1 is registered by another principal")
	admin := f.as("admin")
	list, err := admin.is.ListInstances(f.ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Msg.GetInstances() {
		if r.GetInstance().GetWorkloadIdentity() == "app-1" && (r.GetInstance().GetBootId() != "b1" || r.GetRegisteredBy() != "instance" ||
			r.GetAuthMethod() != "token" || !r.GetInstanceCredential() || r.GetMembershipEpoch() != rec.GetMembershipEpoch()) {
			t.Errorf("after the takeover attempt app-1 is %v", r)
		}
	}
	// A new boot by its own principal is fine.
	if rec, err = inst.register("app-1", "b2"); err != nil {
		t.Fatal(err)
	}

	// ACK and heartbeat forged as app-1 by the other principal: refused,
	// with the secrets it would need in hand.
	ack := &pawlv1.Ack{ConfigId: "app", Generation: rel.GetGeneration(), WorkloadIdentity: "app-1", BootId: "b2", MembershipEpoch: rec.GetMembershipEpoch(),
		ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_REJECTED, Reason: "forged"}
	_, err = other.ro.Ack(f.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
	wantCode(t, "forged ACK", err, connect.CodePermissionDenied, "another principal registered it")
	_, err = other.is.Heartbeat(f.ctx, connect.NewRequest(&pawlv1.HeartbeatRequest{WorkloadIdentity: "app-1", BootId: "b2"}))
	wantCode(t, "forged heartbeat", err, connect.CodePermissionDenied)
	_, err = inst.ro.Ack(f.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "app", Generation: 1, WorkloadIdentity: "billing-1", BootId: "x", MembershipEpoch: 1,
		ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_DISCOVERED}}))
	wantCode(t, "ACK outside the grant", err, connect.CodePermissionDenied)
	st, err := admin.ro.GetRolloutStatus(f.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "app", Generation: rel.GetGeneration()}))
	if err != nil || st.Msg.GetStop() != nil || len(st.Msg.GetAcks()) != 0 {
		t.Errorf("after the forged ACK: %v, %v", st.Msg, err)
	}

	// Downloads: what app-1 is assigned, and nothing else.
	if _, err := inst.rs.GetRelease(f.ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "app", Generation: 1, WorkloadIdentity: "app-1", OmitMembership: true})); err != nil {
		t.Errorf("the assigned release: %v", err)
	}
	_, err = inst.rs.GetRelease(f.ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "app", Generation: 1, WorkloadIdentity: "app-2"}))
	wantCode(t, "a release app-2 is not assigned", err, connect.CodePermissionDenied, `"app-2" is not`)
	_, err = inst.rs.GetRelease(f.ctx, connect.NewRequest(&pawlv1.GetReleaseRequest{ConfigId: "app", Generation: 1, WorkloadIdentity: "billing-1"}))
	wantCode(t, "a release for another identity", err, connect.CodePermissionDenied, `identity "billing-1"`)
	if err := firstOf(inst.vs.Download(f.ctx, connect.NewRequest(&pawlv1.DownloadRequest{Digest: digest, WorkloadIdentity: "app-1"}))); err != nil {
		t.Errorf("the assigned validator: %v", err)
	}
	other2 := strings.Repeat("0", 64)
	err = firstOf(inst.vs.Download(f.ctx, connect.NewRequest(&pawlv1.DownloadRequest{Digest: "sha256:" + other2, WorkloadIdentity: "app-1"})))
	wantCode(t, "an unassigned validator", err, connect.CodePermissionDenied)
	err = firstOf(inst.vs.Download(f.ctx, connect.NewRequest(&pawlv1.DownloadRequest{Digest: digest})))
	wantCode(t, "a download naming no identity for a pool credential", err, connect.CodePermissionDenied, "workload_identity")

	// Boot IDs and epochs: admins only.
	list, err = f.as("releaser").is.ListInstances(f.ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Msg.GetInstances() {
		if r.GetInstance().GetBootId() != "" || r.GetMembershipEpoch() != 0 {
			t.Errorf("a releaser sees %v", r)
		}
	}
}

// TestRequireInstanceCredential: 500 heavy instances registered with
// another credential (an admin's) join a release's membership and can
// meet a traffic-weight quorum, unless the release requires instance
// credentials: then only the instance registered with one is a member,
// and it alone decides.
func TestRequireInstanceCredential(t *testing.T) {
	clock := testclock.New(time.Now())
	f := newAuthFixture(t, server.WithClock(clock.Now))
	digest, _, _ := f.setup() // app-1, registered by the instance credential
	admin := f.as("admin")
	const fakes = 500
	errs := make(chan error, fakes)
	for i := range fakes {
		go func() {
			_, err := admin.is.Register(f.ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
				WorkloadIdentity: fmt.Sprintf("app-fake-%d", i), BootId: "b", Zone: "z", TrafficWeight: 1000,
			}}))
			errs <- err
		}()
	}
	for range fakes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	create := func(require bool, weight int) *pawlv1.Release {
		spec := routingSpec("app", digest, weight)
		spec.Stages = []*pawlv1.Stage{{Name: "w", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_TRAFFIC_WEIGHT, Fraction: 0.5}}}
		spec.RequireInstanceCredential = require
		resp, err := f.as("releaser").rs.CreateRelease(f.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRelease()
	}
	open := create(false, 30)
	if got := open.GetMemberCount(); got != fakes+1 {
		t.Fatalf("without the requirement the membership has %d members, want %d", got, fakes+1)
	}
	strict := create(true, 40)
	if got := strict.GetMemberCount(); got != 1 || !strict.GetSpec().GetRequireInstanceCredential() {
		t.Fatalf("with the requirement the membership has %d members, want 1 (app-1): %v", got, strict.GetSpec())
	}
	// A fake's ACK as admin does not count; app-1's does, and passes the
	// stage.
	fakeAck := &pawlv1.Ack{ConfigId: "app", Generation: strict.GetGeneration(), WorkloadIdentity: "app-fake-1", BootId: "b", MembershipEpoch: 1,
		ContentDigest: strict.GetContentDigest(), ValidatorDigest: digest, ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true}
	resp, err := admin.ro.Ack(f.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: fakeAck}))
	if err != nil || resp.Msg.GetAck().GetCounted() {
		t.Errorf("a fake's ACK: %v, %v", resp, err)
	}
	rec := epochOf(t, admin.is, "app-1")
	resp, err = f.as("instance").ro.Ack(f.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "app", Generation: strict.GetGeneration(),
		WorkloadIdentity: "app-1", BootId: "b1", MembershipEpoch: rec, ContentDigest: strict.GetContentDigest(), ValidatorDigest: digest,
		ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, HealthOk: true}}))
	if err != nil || !resp.Msg.GetAck().GetCounted() {
		t.Fatalf("app-1's ACK: %v, %v", resp, err)
	}
	st, err := admin.ro.GetRolloutStatus(f.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "app", Generation: strict.GetGeneration()}))
	if err != nil || st.Msg.GetStages()[0].GetOutcome() != "passed" {
		t.Errorf("the stage after app-1's ACK: %v, %v", st.Msg.GetStages(), err)
	}
	// Once app-1's lease ran out, an admin registers it again: the member's
	// reports from that registration do not count.
	clock.Advance(server.DefaultInstanceLease + time.Second)
	again, err := admin.register("app-1", "b9")
	if err != nil || again.GetInstanceCredential() || again.GetRegisteredBy() != "admin" {
		t.Fatalf("the admin's registration of app-1: %v, %v", again, err)
	}
	resp, err = admin.ro.Ack(f.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "app", Generation: strict.GetGeneration(),
		WorkloadIdentity: "app-1", BootId: "b9", MembershipEpoch: again.GetMembershipEpoch(), ContentDigest: strict.GetContentDigest(), ValidatorDigest: digest,
		ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_REJECTED, Reason: "planted"}}))
	if err != nil || resp.Msg.GetAck().GetCounted() || !strings.Contains(resp.Msg.GetAck().GetNotCountedReason(), "instance credential") {
		t.Errorf("an ACK from the admin's registration: %v, %v", resp, err)
	}
}

// TestActorIsThePrincipal: records name the authenticated principal, and
// Pawl-Actor only adds an on-behalf-of note.
func TestActorIsThePrincipal(t *testing.T) {
	f := newAuthFixture(t)
	digest, rel, _ := f.setup()
	if rel.GetCreatedBy() != "releaser" {
		t.Errorf("created_by %q, want the principal", rel.GetCreatedBy())
	}
	req := connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "app", Generation: rel.GetGeneration(), Reason: "test"})
	req.Header().Set("Pawl-Actor", "alice")
	resp, err := f.as("promoter").ro.StopRollout(f.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetStop().GetActor(); got != "promoter (on behalf of alice)" {
		t.Errorf("stop actor %q", got)
	}
	info, err := f.as("admin").vs.GetValidator(f.ctx, connect.NewRequest(&pawlv1.GetValidatorRequest{Digest: digest}))
	if err != nil || info.Msg.GetValidator().GetUploader() != "admin" {
		t.Errorf("uploader: %v, %v", info, err)
	}
}

// TestAuthenticatedCallsAndRefusalsAreAuditedAsTheirPrincipal: with an
// auth file, the audit log names the authenticated principal of a write
// (with its on-behalf-of note apart), the principal a refusal was refused
// to, and a call without a credential as unauthenticated with its address,
// never as what its Pawl-Actor header claims; receipts name the principal
// too.
func TestAuthenticatedCallsAndRefusalsAreAuditedAsTheirPrincipal(t *testing.T) {
	f := newAuthFixture(t)
	put := func(c clients, key, actor string) (string, error) {
		req := connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte("v")})
		req.Header().Set("Pawl-Actor", actor)
		resp, err := c.kv.Put(c.ctx, req)
		if err != nil {
			var ce *connect.Error
			if errors.As(err, &ce) {
				return ce.Meta().Get("Pawl-Request-Id"), err
			}
			return "", err
		}
		return resp.Header().Get("Pawl-Request-Id"), nil
	}
	written, err := put(f.as("writer"), "/app/k", "alice")
	if err != nil {
		t.Fatal(err)
	}
	denied, err := put(f.as("reader"), "/app/k", "alice")
	wantCode(t, "reader puts", err, connect.CodePermissionDenied)
	anonymous, err := put(f.as(""), "/app/k", "admin")
	wantCode(t, "no token", err, connect.CodeUnauthenticated)
	records := auditRecords(t, f.ctx, f.as("admin").au, 100)
	for _, c := range []struct {
		id, principal, onBehalfOf, outcome string
	}{
		{written, "writer", "alice", "ok"},
		{denied, "reader", "alice", "permission_denied"},
		{anonymous, "unauthenticated 127.0.0.1:", "", "unauthenticated"},
	} {
		r, ok := records[c.id]
		if !ok {
			t.Errorf("no audit record of request %q", c.id)
			continue
		}
		if !strings.HasPrefix(r.Principal, c.principal) || r.OnBehalfOf != c.onBehalfOf || r.Outcome != c.outcome {
			t.Errorf("record of %s = principal %q on behalf of %q, outcome %q; want %q, %q, %q", c.id, r.Principal, r.OnBehalfOf, r.Outcome, c.principal, c.onBehalfOf, c.outcome)
		}
	}
}
