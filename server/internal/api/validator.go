package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/server/internal/validator"
	"github.com/pawlcfg/pawl/validators/host"
)

// downloadChunk is the size of one Download message: small enough for any
// gRPC client's default 4 MiB receive limit.
const downloadChunk = 1 << 20

// Validators is the ValidatorService handler.
type Validators struct {
	validators    *validator.Validators
	maxValueBytes int
	log           *slog.Logger
}

var _ pawlv1connect.ValidatorServiceHandler = (*Validators)(nil)

// NewValidators returns the ValidatorService handler; Validate refuses
// content over maxValueBytes.
func NewValidators(v *validator.Validators, maxValueBytes int, log *slog.Logger) *Validators {
	return &Validators{validators: v, maxValueBytes: maxValueBytes, log: log}
}

// Upload implements pawl.v1.ValidatorService.Upload.
func (h *Validators) Upload(ctx context.Context, req *connect.Request[pawlv1.UploadRequest]) (*connect.Response[pawlv1.UploadResponse], error) {
	uploader := actor(ctx, req)
	info, created, err := h.validators.Upload(ctx, req.Msg.GetWasm(), req.Msg.GetName(), uploader)
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	if created {
		h.log.Info("validator uploaded", "digest", info.Digest, "name", info.Name, "size", info.Size, "uploader", uploader)
	}
	return connect.NewResponse(&pawlv1.UploadResponse{Validator: toProtoValidator(info), Created: created}), nil
}

// GetValidator implements pawl.v1.ValidatorService.GetValidator.
func (h *Validators) GetValidator(ctx context.Context, req *connect.Request[pawlv1.GetValidatorRequest]) (*connect.Response[pawlv1.GetValidatorResponse], error) {
	info, err := h.validators.Get(ctx, req.Msg.GetDigest())
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	return connect.NewResponse(&pawlv1.GetValidatorResponse{Validator: toProtoValidator(info)}), nil
}

// ListValidators implements pawl.v1.ValidatorService.ListValidators. The
// page token is the last digest of the previous page.
func (h *Validators) ListValidators(ctx context.Context, req *connect.Request[pawlv1.ListValidatorsRequest]) (*connect.Response[pawlv1.ListValidatorsResponse], error) {
	size, err := PageSize(req.Msg.GetPageSize())
	if err != nil {
		return nil, err
	}
	infos, more, err := h.validators.List(ctx, req.Msg.GetPageToken(), size)
	if errors.Is(err, validator.ErrInvalid) {
		return nil, InvalidArgument("page_token is not a token of this listing; start again without it")
	}
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	resp := &pawlv1.ListValidatorsResponse{}
	for _, info := range infos {
		resp.Validators = append(resp.Validators, toProtoValidator(info))
	}
	if more {
		resp.NextPageToken = infos[len(infos)-1].Digest
	}
	return connect.NewResponse(resp), nil
}

// Download implements pawl.v1.ValidatorService.Download.
func (h *Validators) Download(ctx context.Context, req *connect.Request[pawlv1.DownloadRequest], stream *connect.ServerStream[pawlv1.DownloadResponse]) error {
	info, data, err := h.validators.Module(ctx, req.Msg.GetDigest())
	if err != nil {
		return Error(h.log, req.Spec(), err)
	}
	if err := stream.Send(&pawlv1.DownloadResponse{Kind: &pawlv1.DownloadResponse_Validator{Validator: toProtoValidator(info)}}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), downloadChunk)
		if err := stream.Send(&pawlv1.DownloadResponse{Kind: &pawlv1.DownloadResponse_Chunk{Chunk: data[:n]}}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Validate implements pawl.v1.ValidatorService.Validate.
func (h *Validators) Validate(ctx context.Context, req *connect.Request[pawlv1.ValidateRequest]) (*connect.Response[pawlv1.ValidateResponse], error) {
	m := req.Msg
	if len(m.GetContent()) > h.maxValueBytes {
		return nil, sizeLimit("--max-value-bytes", "the content", len(m.GetContent()), h.maxValueBytes)
	}
	if len(m.GetParams()) > 0 && !json.Valid(m.GetParams()) {
		return nil, InvalidArgument("params must be a JSON document")
	}
	res, err := h.validators.Run(ctx, m.GetDigest(), host.Input{Config: m.GetContent(), MediaType: m.GetMediaType(), Name: m.GetConfigName(), Params: m.GetParams()})
	if err != nil && !errors.Is(err, validator.ErrNotFound) && !errors.Is(err, validator.ErrInvalid) {
		err = fmt.Errorf("validator %s: %w", m.GetDigest(), err) // it ran, and failed
	}
	if err != nil {
		return nil, Error(h.log, req.Spec(), err)
	}
	violations := host.RedactViolations(res.Violations, host.SecretValues(m.GetContent(), res.Secrets))
	return connect.NewResponse(&pawlv1.ValidateResponse{Valid: res.Valid, Digest: m.GetDigest(), Violations: toProtoViolations(violations)}), nil
}

func toProtoViolations(vs []host.Violation) []*pawlv1.Violation {
	out := make([]*pawlv1.Violation, 0, len(vs))
	for _, v := range vs {
		sev := pawlv1.Severity_SEVERITY_ERROR
		if v.Severity == "warning" {
			sev = pawlv1.Severity_SEVERITY_WARNING
		}
		out = append(out, &pawlv1.Violation{Path: v.Path, Message: v.Message, Severity: sev})
	}
	return out
}

func toProtoValidator(info validator.Info) *pawlv1.ValidatorInfo {
	return &pawlv1.ValidatorInfo{
		Digest: info.Digest, Name: info.Name, AbiVersion: int32(info.ABIVersion), SizeBytes: int64(info.Size),
		UploadedAt: timestamppb.New(info.UploadedAt), Uploader: info.Uploader,
	}
}
