package server_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/sdk/pawlerr"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/validators/host"
)

func newValidators(t testing.TB, srv *testserver.Server) pawlv1connect.ValidatorServiceClient {
	return pawlv1connect.NewValidatorServiceClient(testserver.HTTPClient(t), srv.URL, connect.WithGRPC())
}

func upload(t testing.TB, vs pawlv1connect.ValidatorServiceClient, name string) string {
	t.Helper()
	req := connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasmbuild.Build(t, name), Name: name})
	req.Header().Set("Pawl-Actor", "ci@example")
	resp, err := vs.Upload(context.Background(), req)
	if err != nil {
		t.Fatalf("Upload(%s): %v", name, err)
	}
	return resp.Msg.GetValidator().GetDigest()
}

func validate(vs pawlv1connect.ValidatorServiceClient, digest, content string) (*pawlv1.ValidateResponse, error) {
	resp, err := vs.Validate(context.Background(), connect.NewRequest(&pawlv1.ValidateRequest{
		Digest: digest, Content: []byte(content), MediaType: "application/json",
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func TestValidatorUploadGetListDownload(t *testing.T) {
	srv := testserver.Start(t)
	vs := newValidators(t, srv)
	ctx := context.Background()
	wasm := wasmbuild.Build(t, "routing")
	resp, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm, Name: "routing"}))
	if err != nil {
		t.Fatal(err)
	}
	info := resp.Msg.GetValidator()
	if !resp.Msg.GetCreated() || info.GetDigest() != host.Digest(wasm) || info.GetAbiVersion() != 1 ||
		info.GetSizeBytes() != int64(len(wasm)) || info.GetName() != "routing" || info.GetUploader() == "" ||
		time.Since(info.GetUploadedAt().AsTime()) > time.Minute {
		t.Fatalf("Upload = %v", resp.Msg)
	}
	// The same bytes again: idempotent, the first upload's metadata stays.
	again, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: wasm, Name: "renamed"}))
	if err != nil || again.Msg.GetCreated() || again.Msg.GetValidator().GetName() != "routing" {
		t.Fatalf("second Upload = %v, %v", again, err)
	}
	got, err := vs.GetValidator(ctx, connect.NewRequest(&pawlv1.GetValidatorRequest{Digest: info.GetDigest()}))
	if err != nil || got.Msg.GetValidator().GetDigest() != info.GetDigest() {
		t.Fatalf("GetValidator = %v, %v", got, err)
	}
	second := upload(t, vs, "jsonschema")
	list, err := vs.ListValidators(ctx, connect.NewRequest(&pawlv1.ListValidatorsRequest{PageSize: 1}))
	if err != nil || len(list.Msg.GetValidators()) != 1 || list.Msg.GetNextPageToken() == "" {
		t.Fatalf("ListValidators page 1 = %v, %v", list, err)
	}
	list2, err := vs.ListValidators(ctx, connect.NewRequest(&pawlv1.ListValidatorsRequest{PageSize: 1, PageToken: list.Msg.GetNextPageToken()}))
	if err != nil || len(list2.Msg.GetValidators()) != 1 || list2.Msg.GetNextPageToken() != "" {
		t.Fatalf("ListValidators page 2 = %v, %v", list2, err)
	}
	digests := []string{list.Msg.GetValidators()[0].GetDigest(), list2.Msg.GetValidators()[0].GetDigest()}
	if !(digests[0] < digests[1]) || (digests[0] != second && digests[1] != second) {
		t.Fatalf("listed %v", digests)
	}

	stream, err := vs.Download(ctx, connect.NewRequest(&pawlv1.DownloadRequest{Digest: second}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var data []byte
	var first *pawlv1.ValidatorInfo
	chunks := 0
	for stream.Receive() {
		if v := stream.Msg().GetValidator(); v != nil {
			first = v
			continue
		}
		chunks++
		data = append(data, stream.Msg().GetChunk()...)
	}
	if stream.Err() != nil || first.GetDigest() != second || host.Digest(data) != second || chunks < 2 {
		t.Fatalf("Download: info %v, %d bytes in %d chunks, digest %s, %v", first, len(data), chunks, host.Digest(data), stream.Err())
	}
	if !bytes.Equal(data, wasmbuild.Build(t, "jsonschema")) {
		t.Fatal("downloaded bytes differ from the uploaded module")
	}
}

// TestValidatorRefusals checks each bad upload and validation: the code,
// the message, and that the server stores nothing and keeps serving.
func TestValidatorRefusals(t *testing.T) {
	// A generous time limit, so that the memory and output limits are what
	// stop membomb and bigoutput even on a loaded machine; loop gets its own
	// server with a short one.
	srv := testserver.Start(t, server.WithMaxValidatorBytes(4<<20), server.WithValidatorTimeout(20*time.Second),
		server.WithValidatorMemoryLimit(32<<20))
	vs := newValidators(t, srv)
	ctx := context.Background()
	routing := wasmbuild.Build(t, "routing")
	uploads := []struct {
		name string
		wasm []byte
		code connect.Code
		msg  string
	}{
		{"not wasm", []byte(`{"not": "wasm"}`), connect.CodeInvalidArgument, "not a WebAssembly module"},
		{"truncated", routing[:len(routing)/3], connect.CodeInvalidArgument, "not a WebAssembly module"},
		{"over the limit", make([]byte, 4<<20+1), connect.CodeResourceExhausted, "the limit is 4194304 bytes"},
		{"forbidden import", wasmbuild.Build(t, "hostile/forbidden"), connect.CodeInvalidArgument, "import env.pawl_escape is not allowed"},
		{"wrong ABI version", wasmbuild.Build(t, "hostile/abiv2"), connect.CodeInvalidArgument, "pawl_abi_version returned 2"},
		{"no ABI exports", wasmbuild.Build(t, "hostile/noabi"), connect.CodeInvalidArgument, "export pawl_validate is missing"},
	}
	for _, u := range uploads {
		t.Run("upload "+u.name, func(t *testing.T) {
			_, err := vs.Upload(ctx, connect.NewRequest(&pawlv1.UploadRequest{Wasm: u.wasm}))
			if connect.CodeOf(err) != u.code || !strings.Contains(err.Error(), u.msg) {
				t.Fatalf("Upload = %v; want %v saying %q", err, u.code, u.msg)
			}
			if l, ok := pawlerr.LimitFrom(err); (u.code == connect.CodeResourceExhausted) != ok ||
				ok && (l.GetLimit() != "--max-validator-bytes" || l.GetValue() != 4<<20+1 || l.GetLimitValue() != 4<<20) {
				t.Fatalf("Upload = %v with detail %v; want LimitExceeded{--max-validator-bytes} only over the limit", err, l)
			}
		})
	}
	list, err := vs.ListValidators(ctx, connect.NewRequest(&pawlv1.ListValidatorsRequest{}))
	if err != nil || len(list.Msg.GetValidators()) != 0 {
		t.Fatalf("refused uploads were stored: %v, %v", list, err)
	}

	digests := map[string]string{}
	for _, name := range []string{"hostile/membomb", "hostile/trap", "hostile/bigoutput"} {
		digests[name] = upload(t, vs, name)
	}
	// Short for a limit, yet long enough for the upload's Load (the Go
	// runtime's start and the ABI version call, under the same
	// wall-clock limit) on a loaded machine: loop never returns.
	quick := testserver.Start(t, server.WithValidatorTimeout(3*time.Second))
	quickVS := newValidators(t, quick)
	loop := upload(t, quickVS, "hostile/loop")
	_, err = validate(quickVS, loop, "{}")
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "ran longer than the 3s limit") {
		t.Fatalf("loop = %v; want deadline_exceeded", err)
	}
	unknown := host.Digest([]byte("never uploaded"))
	validations := []struct {
		name, digest string
		code         connect.Code
		msg          string
		// limit and max are the LimitExceeded detail of a limit's refusal.
		limit string
		max   uint64
	}{
		{"unknown digest", unknown, connect.CodeNotFound, "no validator has digest " + unknown, "", 0},
		{"malformed digest", "md5:abc", connect.CodeInvalidArgument, "sha256:<64 lowercase hex digits>", "", 0},
		{"membomb", digests["hostile/membomb"], connect.CodeResourceExhausted, "the module needed more than 32 MiB (pawld --validator-memory-bytes)",
			"--validator-memory-bytes", 32 << 20},
		{"trap", digests["hostile/trap"], connect.CodeInvalidArgument, "validator gave up on purpose", "", 0},
		{"bigoutput", digests["hostile/bigoutput"], connect.CodeResourceExhausted, "output too large", "validator output bytes", host.DefaultMaxOutput},
	}
	for _, v := range validations {
		t.Run("validate "+v.name, func(t *testing.T) {
			_, err := validate(vs, v.digest, "{}")
			if connect.CodeOf(err) != v.code || !strings.Contains(err.Error(), v.msg) {
				t.Fatalf("Validate = %v; want %v saying %q", err, v.code, v.msg)
			}
			if v.limit != "" {
				l, ok := pawlerr.LimitFrom(err)
				if !ok || l.GetLimit() != v.limit || l.GetLimitValue() != v.max || l.GetUnit() != "bytes" {
					t.Fatalf("Validate = %v with detail %v; want LimitExceeded{%s, %d bytes}", err, l, v.limit, v.max)
				}
			}
		})
	}
	// The server still serves keys and validations.
	put(t, newKV(t, srv), "/still/serving", "yes")
	good := upload(t, vs, "routing")
	res, err := validate(vs, good, `{"upstreams":[{"host":"a","weight":100}]}`)
	if err != nil || !res.GetValid() {
		t.Fatalf("good validation after hostile ones: %v, %v", res, err)
	}
}

func TestValidateReportsPathsAndMessages(t *testing.T) {
	srv := testserver.Start(t)
	vs := newValidators(t, srv)
	schema := upload(t, vs, "jsonschema")
	routing := upload(t, vs, "routing")

	res, err := validate(vs, schema, `{"currency":"EUR","max_amount":2000000}`)
	if err != nil || res.GetValid() || len(res.GetViolations()) != 1 || res.GetDigest() != schema {
		t.Fatalf("Validate = %v, %v", res, err)
	}
	v := res.GetViolations()[0]
	if v.GetPath() != "/max_amount" || !strings.HasPrefix(v.GetMessage(), "maximum: got 2") || v.GetSeverity() != pawlv1.Severity_SEVERITY_ERROR {
		t.Fatalf("violation = %v", v)
	}
	res, err = validate(vs, routing, `{"upstreams":[{"host":"a","weight":70},{"host":"b","weight":20}]}`)
	if err != nil || res.GetValid() || res.GetViolations()[0].GetMessage() != "weights sum to 90; they must sum to 100" {
		t.Fatalf("routing Validate = %v, %v", res, err)
	}
	// Parameters reach the module.
	resp, err := vs.Validate(context.Background(), connect.NewRequest(&pawlv1.ValidateRequest{
		Digest: schema, Content: []byte(`{"name": 5}`), Params: []byte(`{"schema":{"properties":{"name":{"type":"string"}}}}`),
	}))
	if err != nil || resp.Msg.GetValid() || resp.Msg.GetViolations()[0].GetPath() != "/name" {
		t.Fatalf("Validate with params = %v, %v", resp, err)
	}
	_, err = vs.Validate(context.Background(), connect.NewRequest(&pawlv1.ValidateRequest{Digest: schema, Params: []byte(`{not json`)}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Validate with bad params = %v", err)
	}
}

func TestConcurrentValidationsOverTheAPI(t *testing.T) {
	srv := testserver.Start(t)
	vs := newValidators(t, srv)
	digest := upload(t, vs, "routing")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				w := (g*10 + i) % 100
				res, err := validate(vs, digest, `{"upstreams":[{"host":"a","weight":`+strconv.Itoa(w)+`},{"host":"b","weight":`+strconv.Itoa(100-w)+`}]}`)
				if err != nil || !res.GetValid() {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent validation failed: %v", err)
	}
}

func TestValidatorsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	srv := testserver.StartIn(t, dir)
	digest := upload(t, newValidators(t, srv), "routing")
	srv.Stop()
	srv = testserver.StartIn(t, dir)
	vs := newValidators(t, srv)
	res, err := validate(vs, digest, `{"upstreams":[]}`)
	if err != nil || res.GetValid() {
		t.Fatalf("validation after restart = %v, %v", res, err)
	}
}
