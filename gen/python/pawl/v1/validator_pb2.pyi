from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
SEVERITY_ERROR: Severity
SEVERITY_UNSPECIFIED: Severity
SEVERITY_WARNING: Severity

class DownloadRequest(_message.Message):
    __slots__ = ["digest", "workload_identity"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    digest: str
    workload_identity: str
    def __init__(self, digest: _Optional[str] = ..., workload_identity: _Optional[str] = ...) -> None: ...

class DownloadResponse(_message.Message):
    __slots__ = ["chunk", "validator"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    validator: ValidatorInfo
    def __init__(self, validator: _Optional[_Union[ValidatorInfo, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class GetValidatorRequest(_message.Message):
    __slots__ = ["digest"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    def __init__(self, digest: _Optional[str] = ...) -> None: ...

class GetValidatorResponse(_message.Message):
    __slots__ = ["validator"]
    VALIDATOR_FIELD_NUMBER: _ClassVar[int]
    validator: ValidatorInfo
    def __init__(self, validator: _Optional[_Union[ValidatorInfo, _Mapping]] = ...) -> None: ...

class ListValidatorsRequest(_message.Message):
    __slots__ = ["page_size", "page_token"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListValidatorsResponse(_message.Message):
    __slots__ = ["next_page_token", "validators"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALIDATORS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    validators: _containers.RepeatedCompositeFieldContainer[ValidatorInfo]
    def __init__(self, validators: _Optional[_Iterable[_Union[ValidatorInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UploadRequest(_message.Message):
    __slots__ = ["name", "wasm"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WASM_FIELD_NUMBER: _ClassVar[int]
    name: str
    wasm: bytes
    def __init__(self, wasm: _Optional[bytes] = ..., name: _Optional[str] = ...) -> None: ...

class UploadResponse(_message.Message):
    __slots__ = ["created", "validator"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_FIELD_NUMBER: _ClassVar[int]
    created: bool
    validator: ValidatorInfo
    def __init__(self, validator: _Optional[_Union[ValidatorInfo, _Mapping]] = ..., created: bool = ...) -> None: ...

class ValidateRequest(_message.Message):
    __slots__ = ["config_name", "content", "digest", "media_type", "params"]
    CONFIG_NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    config_name: str
    content: bytes
    digest: str
    media_type: str
    params: bytes
    def __init__(self, digest: _Optional[str] = ..., content: _Optional[bytes] = ..., media_type: _Optional[str] = ..., config_name: _Optional[str] = ..., params: _Optional[bytes] = ...) -> None: ...

class ValidateResponse(_message.Message):
    __slots__ = ["digest", "valid", "violations"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    VALID_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    digest: str
    valid: bool
    violations: _containers.RepeatedCompositeFieldContainer[Violation]
    def __init__(self, valid: bool = ..., violations: _Optional[_Iterable[_Union[Violation, _Mapping]]] = ..., digest: _Optional[str] = ...) -> None: ...

class ValidatorInfo(_message.Message):
    __slots__ = ["abi_version", "digest", "name", "size_bytes", "uploaded_at", "uploader"]
    ABI_VERSION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPLOADED_AT_FIELD_NUMBER: _ClassVar[int]
    UPLOADER_FIELD_NUMBER: _ClassVar[int]
    abi_version: int
    digest: str
    name: str
    size_bytes: int
    uploaded_at: _timestamp_pb2.Timestamp
    uploader: str
    def __init__(self, digest: _Optional[str] = ..., name: _Optional[str] = ..., abi_version: _Optional[int] = ..., size_bytes: _Optional[int] = ..., uploaded_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., uploader: _Optional[str] = ...) -> None: ...

class Violation(_message.Message):
    __slots__ = ["message", "path", "severity"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    message: str
    path: str
    severity: Severity
    def __init__(self, path: _Optional[str] = ..., message: _Optional[str] = ..., severity: _Optional[_Union[Severity, str]] = ...) -> None: ...

class Severity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
