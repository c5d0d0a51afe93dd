// Package validatorservice implements pawl.v1.ValidatorService: validators
// stored as immutable blobs in the store, addressed by digest, checked at
// upload and run by validators/host.
package validatorservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/apierr"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/validators/host"
)

// blobKind is the store's blob kind for validator modules.
const blobKind = "validators"

// downloadChunk is the size of one Download message: small enough for any
// gRPC client's default 4 MiB receive limit.
const downloadChunk = 1 << 20

// ActorHeader names who is calling; it is recorded as the uploader.
const ActorHeader = "Pawl-Actor"

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Service is the ValidatorService handler. Close releases the loaded
// modules.
type Service struct {
	store         store.Store
	runtime       *host.Runtime
	maxWasmBytes  int
	maxValueBytes int
	log           *slog.Logger
	now           func() time.Time

	mu     sync.Mutex
	loaded map[string]*host.Validator // by digest
}

var _ pawlv1connect.ValidatorServiceHandler = (*Service)(nil)

// New returns the service. It refuses modules over maxWasmBytes and content
// to validate over maxValueBytes.
func New(st store.Store, rt *host.Runtime, maxWasmBytes, maxValueBytes int, log *slog.Logger) *Service {
	return &Service{
		store: st, runtime: rt, maxWasmBytes: maxWasmBytes, maxValueBytes: maxValueBytes, log: log,
		now: time.Now, loaded: map[string]*host.Validator{},
	}
}

// Close releases every loaded validator.
func (s *Service) Close(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for digest, v := range s.loaded {
		_ = v.Close(ctx)
		delete(s.loaded, digest)
	}
}

// meta is what the store keeps beside a module.
type meta struct {
	Name       string    `json:"name"`
	ABIVersion int       `json:"abi_version"`
	Size       int       `json:"size"`
	UploadedAt time.Time `json:"uploaded_at"`
	Uploader   string    `json:"uploader"`
}

// Upload implements pawl.v1.ValidatorService.Upload.
func (s *Service) Upload(ctx context.Context, req *connect.Request[pawlv1.UploadRequest]) (*connect.Response[pawlv1.UploadResponse], error) {
	wasm := req.Msg.GetWasm()
	if len(wasm) > s.maxWasmBytes {
		return nil, apierr.ResourceExhausted("the module is %d bytes; the limit is %d bytes (pawld --max-validator-bytes)", len(wasm), s.maxWasmBytes)
	}
	digest := host.Digest(wasm)
	if existing, err := s.store.GetBlob(ctx, blobKind, digest, false); err == nil {
		info, err := toInfo(existing)
		if err != nil {
			return nil, s.error(req.Spec(), err)
		}
		return connect.NewResponse(&pawlv1.UploadResponse{Validator: info}), nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, s.error(req.Spec(), err)
	}
	v, err := s.runtime.Load(ctx, digest, wasm)
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	uploader := req.Header().Get(ActorHeader)
	if uploader == "" {
		uploader = req.Peer().Addr
	}
	m := meta{Name: req.Msg.GetName(), ABIVersion: v.Info().ABIVersion, Size: len(wasm), UploadedAt: s.now().UTC(), Uploader: uploader}
	encoded, err := json.Marshal(m)
	if err != nil {
		_ = v.Close(ctx)
		return nil, s.error(req.Spec(), err)
	}
	created, err := s.store.PutBlob(ctx, blobKind, store.Blob{ID: digest, Meta: encoded, Data: wasm})
	if err != nil {
		_ = v.Close(ctx)
		return nil, s.error(req.Spec(), err)
	}
	s.keep(ctx, digest, v)
	stored, err := s.store.GetBlob(ctx, blobKind, digest, false) // a concurrent upload may have won
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	info, err := toInfo(stored)
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	if created {
		s.log.Info("validator uploaded", "digest", digest, "name", m.Name, "size", m.Size, "uploader", uploader)
	}
	return connect.NewResponse(&pawlv1.UploadResponse{Validator: info, Created: created}), nil
}

// GetValidator implements pawl.v1.ValidatorService.GetValidator.
func (s *Service) GetValidator(ctx context.Context, req *connect.Request[pawlv1.GetValidatorRequest]) (*connect.Response[pawlv1.GetValidatorResponse], error) {
	b, err := s.blob(ctx, req.Msg.GetDigest(), false)
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	info, err := toInfo(b)
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.GetValidatorResponse{Validator: info}), nil
}

// ListValidators implements pawl.v1.ValidatorService.ListValidators. The
// page token is the last digest of the previous page.
func (s *Service) ListValidators(ctx context.Context, req *connect.Request[pawlv1.ListValidatorsRequest]) (*connect.Response[pawlv1.ListValidatorsResponse], error) {
	size, err := apierr.PageSize(req.Msg.GetPageSize())
	if err != nil {
		return nil, err
	}
	after := req.Msg.GetPageToken()
	if after != "" && !digestPattern.MatchString(after) {
		return nil, apierr.InvalidArgument("page_token is not a token of this listing; start again without it")
	}
	blobs, more, err := s.store.ListBlobs(ctx, blobKind, after, size)
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	resp := &pawlv1.ListValidatorsResponse{}
	for _, b := range blobs {
		info, err := toInfo(b)
		if err != nil {
			return nil, s.error(req.Spec(), err)
		}
		resp.Validators = append(resp.Validators, info)
	}
	if more {
		resp.NextPageToken = blobs[len(blobs)-1].ID
	}
	return connect.NewResponse(resp), nil
}

// Download implements pawl.v1.ValidatorService.Download.
func (s *Service) Download(ctx context.Context, req *connect.Request[pawlv1.DownloadRequest], stream *connect.ServerStream[pawlv1.DownloadResponse]) error {
	b, err := s.blob(ctx, req.Msg.GetDigest(), true)
	if err != nil {
		return s.error(req.Spec(), err)
	}
	info, err := toInfo(b)
	if err != nil {
		return s.error(req.Spec(), err)
	}
	if err := stream.Send(&pawlv1.DownloadResponse{Kind: &pawlv1.DownloadResponse_Validator{Validator: info}}); err != nil {
		return err
	}
	for data := b.Data; len(data) > 0; {
		n := min(len(data), downloadChunk)
		if err := stream.Send(&pawlv1.DownloadResponse{Kind: &pawlv1.DownloadResponse_Chunk{Chunk: data[:n]}}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Validate implements pawl.v1.ValidatorService.Validate.
func (s *Service) Validate(ctx context.Context, req *connect.Request[pawlv1.ValidateRequest]) (*connect.Response[pawlv1.ValidateResponse], error) {
	m := req.Msg
	if len(m.GetContent()) > s.maxValueBytes {
		return nil, apierr.ResourceExhausted("the content is %d bytes; the limit is %d bytes (pawld --max-value-bytes)", len(m.GetContent()), s.maxValueBytes)
	}
	if len(m.GetParams()) > 0 && !json.Valid(m.GetParams()) {
		return nil, apierr.InvalidArgument("params must be a JSON document")
	}
	v, err := s.validator(ctx, m.GetDigest())
	if err != nil {
		return nil, s.error(req.Spec(), err)
	}
	res, err := v.Validate(ctx, host.Input{Config: m.GetContent(), MediaType: m.GetMediaType(), Name: m.GetConfigName(), Params: m.GetParams()})
	if err != nil {
		return nil, s.error(req.Spec(), fmt.Errorf("validator %s: %w", m.GetDigest(), err))
	}
	resp := &pawlv1.ValidateResponse{Valid: res.Valid, Digest: m.GetDigest()}
	for _, vio := range res.Violations {
		sev := pawlv1.Severity_SEVERITY_ERROR
		if vio.Severity == "warning" {
			sev = pawlv1.Severity_SEVERITY_WARNING
		}
		resp.Violations = append(resp.Violations, &pawlv1.Violation{Path: vio.Path, Message: vio.Message, Severity: sev})
	}
	return connect.NewResponse(resp), nil
}

// Run validates in with the stored validator digest, loading it on first
// use: the server-side check of CreateRelease.
func (s *Service) Run(ctx context.Context, digest string, in host.Input) (host.Result, error) {
	v, err := s.validator(ctx, digest)
	if err != nil {
		return host.Result{}, err
	}
	return v.Validate(ctx, in)
}

// blob reads a stored module by digest.
func (s *Service) blob(ctx context.Context, digest string, withData bool) (store.Blob, error) {
	if !digestPattern.MatchString(digest) {
		return store.Blob{}, apierr.InvalidArgument("digest %q is not of the form sha256:<64 lowercase hex digits>", digest)
	}
	b, err := s.store.GetBlob(ctx, blobKind, digest, withData)
	if errors.Is(err, store.ErrNotFound) {
		return store.Blob{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("no validator has digest %s; upload it first (pawl validator upload)", digest))
	}
	return b, err
}

// validator returns the loaded module for digest, loading it from the store
// (which verifies its digest) on first use.
func (s *Service) validator(ctx context.Context, digest string) (*host.Validator, error) {
	s.mu.Lock()
	v := s.loaded[digest]
	s.mu.Unlock()
	if v != nil {
		return v, nil
	}
	b, err := s.blob(ctx, digest, true)
	if err != nil {
		return nil, err
	}
	if v, err = s.runtime.Load(ctx, digest, b.Data); err != nil {
		return nil, fmt.Errorf("load stored validator %s: %w", digest, err)
	}
	return s.keep(ctx, digest, v), nil
}

// keep caches v unless another goroutine loaded the same digest first, and
// returns the cached one.
func (s *Service) keep(ctx context.Context, digest string, v *host.Validator) *host.Validator {
	s.mu.Lock()
	defer s.mu.Unlock()
	if have := s.loaded[digest]; have != nil {
		_ = v.Close(ctx)
		return have
	}
	s.loaded[digest] = v
	return v
}

func (s *Service) error(spec connect.Spec, err error) error {
	return apierr.Connect(s.log, spec.Procedure, err)
}

func toInfo(b store.Blob) (*pawlv1.ValidatorInfo, error) {
	var m meta
	if err := json.Unmarshal(b.Meta, &m); err != nil {
		return nil, fmt.Errorf("validatorservice: metadata of %s: %w", b.ID, err)
	}
	return &pawlv1.ValidatorInfo{
		Digest:     b.ID,
		Name:       m.Name,
		AbiVersion: int32(m.ABIVersion),
		SizeBytes:  int64(m.Size),
		UploadedAt: timestamppb.New(m.UploadedAt),
		Uploader:   m.Uploader,
	}, nil
}
