package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
)

// TestControlCharacterKeysRefused sends keys that would break `pawl ls`
// and every display of keys to each KV call, over Connect and gRPC: each
// is refused with InvalidArgument naming the character and where it is,
// and nothing is written.
func TestControlCharacterKeysRefused(t *testing.T) {
	srv := testserver.Start(t)
	keys := []struct{ key, says string }{
		{"/app/a\nb", "U+000A (line feed) at byte 6"},
		{"/app/a\tb", "U+0009 (tab) at byte 6"},
		{"/app/\x1b[2Jx", "U+001B (escape) at byte 5"},
		{"/app/\u202eexe.txt", "U+202E (bidirectional formatting character) at byte 5"},
		{"/app/\u0085", "U+0085 (C1 control character)"},
		{"/app/admin\u200b", "U+200B (zero width space) at byte 10"},
		{"/app/\U000E0041x", "U+E0041 (tag character) at byte 5"},
	}
	overConnectAndGRPC(t, func(t *testing.T, ctx context.Context, p protocol) {
		kv := pawlv1connect.NewKVServiceClient(p.client(t), srv.URL, p.opts...)
		before := currentRevision(t, kv)
		for _, k := range keys {
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: k.key, Value: []byte("v")}))
			wantCode(t, "Put", err, connect.CodeInvalidArgument, "invalid key", k.says)
			_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/app/fine", Value: []byte("v")}, {Key: k.key, Value: []byte("v")}}}))
			wantCode(t, "Txn op", err, connect.CodeInvalidArgument, "op 1", k.says)
			_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/app/fine", Value: []byte("v")}},
				Compares: []*pawlv1.TxnCompare{{Key: k.key}}}))
			wantCode(t, "Txn compare", err, connect.CodeInvalidArgument, "compare 0", k.says)
			_, err = kv.Delete(ctx, connect.NewRequest(&pawlv1.DeleteRequest{Key: k.key}))
			wantCode(t, "Delete", err, connect.CodeInvalidArgument, k.says)
			_, err = kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: k.key}))
			wantCode(t, "Get", err, connect.CodeInvalidArgument, k.says)
			_, err = kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: k.key}))
			wantCode(t, "List", err, connect.CodeInvalidArgument, "invalid prefix", k.says)
			stream, err := kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: k.key}))
			if err == nil {
				for stream.Receive() {
					t.Fatalf("Watch(%q) sent %v", k.key, stream.Msg())
				}
				err = stream.Err()
				stream.Close()
			}
			wantCode(t, "Watch", err, connect.CodeInvalidArgument, "invalid prefix", k.says)
		}
		if after := currentRevision(t, kv); after != before {
			t.Fatalf("the refused calls moved the revision from %d to %d", before, after)
		}
	})
}

// TestValueLimitNamesTheFlag puts a value over --max-value-bytes but
// under what the server reads of a KV call, and one over that: both are
// ResourceExhausted naming --max-value-bytes, never a number no flag
// sets; a validator module over what the server reads names
// --max-validator-bytes. Over every protocol.
func TestValueLimitNamesTheFlag(t *testing.T) {
	srv := testserver.Start(t, server.WithMaxValueBytes(1000), server.WithTxnLimits(10, 2000), server.WithMaxValidatorBytes(1000))
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			kv := pawlv1connect.NewKVServiceClient(p.client(t), srv.URL, p.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/big", Value: make([]byte, 5000)}))
			wantCode(t, "Put under the transport limit", err, connect.CodeResourceExhausted, "the limit is 1000 bytes", "--max-value-bytes")
			_, err = kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/big", Value: make([]byte, 200_000)}))
			wantCode(t, "Put over the transport limit", err, connect.CodeResourceExhausted, "up to 1000 bytes (pawld --max-value-bytes)", "--max-txn-bytes")
			_, err = kv.Txn(ctx, connect.NewRequest(&pawlv1.TxnRequest{Ops: []*pawlv1.TxnOp{{Key: "/big", Value: make([]byte, 200_000)}}}))
			wantCode(t, "Txn over the transport limit", err, connect.CodeResourceExhausted, "--max-value-bytes")
			vals := pawlv1connect.NewValidatorServiceClient(p.client(t), srv.URL, p.opts...)
			_, err = vals.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: make([]byte, 200_000)}))
			wantCode(t, "Upload over the transport limit", err, connect.CodeResourceExhausted, "up to 1000 bytes (pawld --max-validator-bytes)")
			if _, err := kv.Get(ctx, connect.NewRequest(&pawlv1.GetRequest{Key: "/big"})); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("Get after the refused puts: %v; want NotFound", err)
			}
		})
	}
}

// rawCall posts body as it is to the procedure at path with the given
// content type, over HTTP/2, and returns the code and message of the
// error the server answered with ("" when it answered none), read from
// what each protocol carries it in: gRPC trailers, the last gRPC-Web
// frame, the Connect end-of-stream message, or the Connect unary error
// body.
func rawCall(t *testing.T, url, path, contentType string, header http.Header, body []byte) (code, message string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("TE", "trailers")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := testserver.HTTPClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return errorOf(t, resp, contentType)
}

// errorOf reads the error in resp, the answer to a request of
// contentType, as rawCall describes.
func errorOf(t testing.TB, resp *http.Response, contentType string) (code, message string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	grpcCode := func(s, m string) (string, string) {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("grpc-status %q", s)
		}
		if n == 0 {
			return "", ""
		}
		m, _ = neturl.PathUnescape(m)
		return connect.Code(n).String(), m
	}
	switch {
	case strings.HasPrefix(contentType, "application/grpc-web"):
		if s := resp.Header.Get("Grpc-Status"); s != "" {
			return grpcCode(s, resp.Header.Get("Grpc-Message"))
		}
		for len(b) >= 5 {
			n := int(binary.BigEndian.Uint32(b[1:5]))
			frame := b[5 : 5+n]
			if b[0]&0x80 != 0 {
				tr, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(frame, '\r', '\n')))).ReadMIMEHeader()
				if err != nil && !errors.Is(err, io.EOF) {
					t.Fatalf("gRPC-Web trailers %q: %v", frame, err)
				}
				return grpcCode(tr.Get("Grpc-Status"), tr.Get("Grpc-Message"))
			}
			b = b[5+n:]
		}
		t.Fatalf("a gRPC-Web response without a status")
	case strings.HasPrefix(contentType, "application/grpc"):
		s := resp.Trailer.Get("Grpc-Status")
		if s == "" {
			s = resp.Header.Get("Grpc-Status")
			return grpcCode(s, resp.Header.Get("Grpc-Message"))
		}
		return grpcCode(s, resp.Trailer.Get("Grpc-Message"))
	case strings.HasPrefix(contentType, "application/connect+"):
		var end struct {
			Error *struct{ Code, Message string } `json:"error"`
		}
		for len(b) >= 5 {
			n := int(binary.BigEndian.Uint32(b[1:5]))
			if b[0]&0x02 != 0 {
				if err := json.Unmarshal(b[5:5+n], &end); err != nil {
					t.Fatalf("end of stream %q: %v", b[5:5+n], err)
				}
			}
			b = b[5+n:]
		}
		if end.Error == nil {
			return "", ""
		}
		return end.Error.Code, end.Error.Message
	}
	if resp.StatusCode == http.StatusOK {
		return "", ""
	}
	var e struct{ Code, Message string }
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("Connect error body %q (HTTP %d): %v", b, resp.StatusCode, err)
	}
	return e.Code, e.Message
}

// envelope frames msg as one message of a streaming protocol.
func envelope(flags byte, msg []byte) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// protoString encodes field 1 of a message as a string, by hand, so that
// it may hold what no generated client would send.
func protoString(s string) []byte {
	return append([]byte{0x0a, byte(len(s))}, s...)
}

// TestMalformedRequestsAreInvalidArgument sends hand-made request bodies
// (an invalid UTF-8 key, a body cut inside a message's prefix or payload,
// a message flagged compressed with no compression named, unknown flags)
// over Connect, gRPC and gRPC-Web, to a unary call and to a stream: each
// is InvalidArgument, the client's mistake, never Internal.
func TestMalformedRequestsAreInvalidArgument(t *testing.T) {
	srv := testserver.Start(t)
	badKey := protoString("/a\xffb")
	good := protoString("/a")
	cases := []struct {
		name string
		body func(enveloped bool) []byte
		says string
	}{
		{"invalid UTF-8 key", func(env bool) []byte {
			if env {
				return envelope(0, badKey)
			}
			return badKey
		}, "invalid UTF-8"},
		{"cut inside the prefix", func(bool) []byte { return envelope(0, good)[:3] }, "5-byte prefix"},
		{"cut inside the message", func(bool) []byte { return envelope(0, good)[:6] }, "bytes before the end of the message"},
		{"compressed without compression", func(bool) []byte { return envelope(1, good) }, "flagged compressed"},
		{"unknown flags", func(bool) []byte { return envelope(0x40, good) }, "flags 0x40"},
	}
	paths := []string{pawlv1connect.KVServiceGetProcedure, pawlv1connect.KVServiceWatchProcedure}
	for _, c := range cases {
		for _, path := range paths {
			unary := path == pawlv1connect.KVServiceGetProcedure
			types := []string{"application/grpc", "application/grpc-web+proto"}
			if unary && c.name == "invalid UTF-8 key" {
				types = append(types, "application/proto")
			}
			if !unary {
				types = append(types, "application/connect+proto")
			}
			for _, ct := range types {
				enveloped := ct != "application/proto"
				code, msg := rawCall(t, srv.URL, path, ct, nil, c.body(enveloped))
				if code != connect.CodeInvalidArgument.String() || !strings.Contains(msg, c.says) {
					t.Errorf("%s to %s as %s: %s %q; want invalid_argument saying %q", c.name, path, ct, code, msg, c.says)
				}
			}
		}
	}
}

// fuzzProcedures are the calls FuzzRequestDecoding sends bodies to: unary
// calls of each kind of request, and a server stream that ends at once.
var fuzzProcedures = []string{
	pawlv1connect.KVServicePutProcedure, pawlv1connect.KVServiceTxnProcedure, pawlv1connect.KVServiceGetProcedure,
	pawlv1connect.RolloutServiceAckProcedure, pawlv1connect.ReleaseServiceCreateReleaseProcedure,
	pawlv1connect.InstanceServiceRegisterProcedure, pawlv1connect.ValidatorServiceDownloadProcedure,
}

// fuzzContentTypes are the protocols and codecs FuzzRequestDecoding
// speaks.
var fuzzContentTypes = []string{"application/proto", "application/json", "application/grpc", "application/grpc-web+proto", "application/connect+proto"}

// FuzzRequestDecoding feeds arbitrary bytes as a request body to the real
// handler, in every protocol, to unary calls and a stream: it never
// panics and never answers Internal or Unknown (a malformed body is the
// client's mistake). A unary call sent as a stream (or the reverse) is
// refused by Connect before any body is read, so those pairs are skipped.
func FuzzRequestDecoding(f *testing.F) {
	f.Add(uint8(0), uint8(0), protoString("/a\xffb"))
	f.Add(uint8(0), uint8(2), envelope(0, protoString("/a"))[:6])
	f.Add(uint8(2), uint8(3), envelope(1, protoString("/a")))
	f.Add(uint8(3), uint8(1), []byte(`{"ack":{"reason":"\u0000"}}`))
	f.Add(uint8(6), uint8(4), envelope(0x40, nil))
	f.Add(uint8(4), uint8(2), envelope(0, []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}))
	srv := testserver.Start(f)
	handler := srv.Server.Handler()
	f.Fuzz(func(t *testing.T, proc, ct uint8, body []byte) {
		path := fuzzProcedures[int(proc)%len(fuzzProcedures)]
		contentType := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]
		stream := path == pawlv1connect.ValidatorServiceDownloadProcedure
		connectUnary := contentType == "application/proto" || contentType == "application/json"
		if stream && connectUnary || !stream && contentType == "application/connect+proto" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
		req.ProtoMajor, req.ProtoMinor, req.Proto = 2, 0, "HTTP/2.0"
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("TE", "trailers")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		code, msg := errorOf(t, rec.Result(), contentType)
		if code == connect.CodeInternal.String() || code == connect.CodeUnknown.String() {
			t.Fatalf("%s as %s with body %q: %s %q", path, contentType, body, code, msg)
		}
	})
}

// TestRequestTextBounded: an ACK reason of 500 KB, a stop reason with an
// escape sequence or invisible format characters, a label with a newline
// and an identity with a word joiner are refused with
// InvalidArgument naming the field and the limit, over Connect and gRPC,
// before anything is stored.
func TestRequestTextBounded(t *testing.T) {
	srv := testserver.Start(t)
	overConnectAndGRPC(t, func(t *testing.T, ctx context.Context, p protocol) {
		rollouts := pawlv1connect.NewRolloutServiceClient(p.client(t), srv.URL, p.opts...)
		_, err := rollouts.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{ConfigId: "web", Generation: 1,
			WorkloadIdentity: "web-1", BootId: "b", MembershipEpoch: 1, State: pawlv1.InstanceState_INSTANCE_STATE_REJECTED, Reason: strings.Repeat("x", 500_000)}}))
		wantCode(t, "Ack", err, connect.CodeInvalidArgument, "ack.reason is 500000 bytes", "the limit is 4096 bytes (pawld --max-text-bytes)")
		_, err = rollouts.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "web", Generation: 1, Reason: "ok\x1b[2Jforged"}))
		wantCode(t, "StopRollout", err, connect.CodeInvalidArgument, "reason holds U+001B (escape) at byte 2")
		_, err = rollouts.StopRollout(ctx, connect.NewRequest(&pawlv1.StopRolloutRequest{ConfigId: "web", Generation: 1, Reason: "approved\u00adby\u200dops"}))
		wantCode(t, "StopRollout", err, connect.CodeInvalidArgument, "reason holds U+00AD (soft hyphen) at byte 8", "format characters (Unicode Cf")
		instances := pawlv1connect.NewInstanceServiceClient(p.client(t), srv.URL, p.opts...)
		_, err = instances.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{WorkloadIdentity: "web-1", BootId: "b",
			Labels: map[string]string{"team": "a\nb"}}}))
		wantCode(t, "Register", err, connect.CodeInvalidArgument, `instance.labels["team"] holds U+000A (line feed) at byte 1`)
		_, err = instances.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{WorkloadIdentity: "web\u20601", BootId: "b"}}))
		wantCode(t, "Register", err, connect.CodeInvalidArgument, `instance.workload_identity holds U+2060 (word joiner) at byte 3`)
		list, err := instances.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
		if err != nil || len(list.Msg.GetInstances()) != 0 {
			t.Fatalf("ListInstances after a refused registration: %v, %v", list, err)
		}
	})
}

// TestLiteralSecretRefused: a release whose secret_refs hold a literal
// password, or a URL with credentials, is refused with InvalidArgument
// that states the grammar and never echoes the value, over Connect and
// gRPC.
func TestLiteralSecretRefused(t *testing.T) {
	srv := testserver.Start(t)
	overConnectAndGRPC(t, func(t *testing.T, ctx context.Context, p protocol) {
		releases := pawlv1connect.NewReleaseServiceClient(p.client(t), srv.URL, p.opts...)
		for _, secret := range []string{"Tr0ub4dor@3", "postgres://admin:hunter2@db/x#1"} {
			_, err := releases.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
				ConfigId: "web", Content: []byte(`{}`), MediaType: "application/json", ValidatorDigest: "sha256:" + strings.Repeat("0", 64),
				SecretRefs: []string{"vault://secret/data/db#7", secret},
				Stages:     []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
				Deadline:   durationpb.New(time.Hour)}}))
			wantCode(t, "CreateRelease", err, connect.CodeInvalidArgument, "secret reference 1 is not a reference", "SCHEME://PATH#VERSION")
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "Tr0ub4dor") {
				t.Fatalf("the refusal echoes the secret: %v", err)
			}
		}
	})
}

// TestMarkedSecretsNeverStored: the routing validator marks upstream
// tokens secret (validators/ABI.md, "secrets"). Its own message quoting a
// short token, in a refused CreateRelease, and an instance's REJECTED
// reason quoting a release's token, over Connect and gRPC, reach the
// caller and the store with the token redacted.
func TestMarkedSecretsNeverStored(t *testing.T) {
	srv := testserver.Start(t)
	digest := upload(t, newValidators(t, srv), "routing")
	content := func(token string) []byte {
		return []byte(`{"upstreams":[{"host":"a","weight":100,"token":"` + token + `"}]}`)
	}
	spec := func(config, token string) *pawlv1.ReleaseSpec {
		return &pawlv1.ReleaseSpec{ConfigId: config, Content: content(token), MediaType: "application/json", ValidatorDigest: digest,
			Stages:       []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
			HealthWindow: durationpb.New(0), Deadline: durationpb.New(time.Hour)}
	}
	overConnectAndGRPC(t, func(t *testing.T, ctx context.Context, p protocol) {
		is := pawlv1connect.NewInstanceServiceClient(p.client(t), srv.URL, p.opts...)
		rs := pawlv1connect.NewReleaseServiceClient(p.client(t), srv.URL, p.opts...)
		ro := pawlv1connect.NewRolloutServiceClient(p.client(t), srv.URL, p.opts...)
		vs := pawlv1connect.NewValidatorServiceClient(p.client(t), srv.URL, p.opts...)

		_, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec("web-"+p.name, "hunter2x")}))
		wantCode(t, "CreateRelease with a short token", err, connect.CodeInvalidArgument, `token "[redacted]" is shorter than 16 characters`)
		if strings.Contains(err.Error(), "hunter2x") {
			t.Fatalf("the refusal shows the token: %v", err)
		}
		dry, err := vs.Validate(ctx, connect.NewRequest(&pawlv1.ValidateRequest{Digest: digest, Content: content("hunter2x")}))
		if err != nil || len(dry.Msg.GetViolations()) != 1 || strings.Contains(dry.Msg.GetViolations()[0].GetMessage(), "hunter2x") {
			t.Fatalf("Validate = %v, %v; want one violation without the token", dry, err)
		}

		id := "pay-" + p.name
		if _, err := is.Register(ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
			WorkloadIdentity: id, BootId: "boot-a", Zone: "zone-a", TrafficWeight: 1}})); err != nil {
			t.Fatal(err)
		}
		const token = "s3cr3t-token-0123456789"
		created, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec("api-"+p.name, token)}))
		if err != nil {
			t.Fatal(err)
		}
		rel := created.Msg.GetRelease()
		_, err = ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: &pawlv1.Ack{
			ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: "boot-a",
			MembershipEpoch: epochOf(t, is, id), ContentDigest: rel.GetContentDigest(), ValidatorDigest: digest, ApplySequence: 1,
			State: pawlv1.InstanceState_INSTANCE_STATE_REJECTED, Reason: "upstream a refused token " + token + " (401)",
		}}))
		if err != nil {
			t.Fatal(err)
		}
		st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration()}))
		if err != nil {
			t.Fatal(err)
		}
		acks := st.Msg.GetAcks()
		if len(acks) != 1 || acks[0].GetReason() != "upstream a refused token [redacted] (401)" {
			t.Fatalf("stored ACKs %v; want one REJECTED whose reason hides the token", acks)
		}
	})
}

// overConnectAndGRPC runs fn as a subtest over Connect (HTTP/2) and
// over gRPC, with a bounded context.
func overConnectAndGRPC(t *testing.T, fn func(t *testing.T, ctx context.Context, p protocol)) {
	for _, p := range protocols {
		if p.name != "connect-h2c" && p.name != "grpc" {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			fn(t, ctx, p)
		})
	}
}

// protocol is an entry of protocols.
type protocol = struct {
	name   string
	client func(testing.TB) *http.Client
	opts   []connect.ClientOption
}
