from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class LimitExceeded(_message.Message):
    __slots__ = ["limit", "limit_value", "unit", "value"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_VALUE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    limit: str
    limit_value: int
    unit: str
    value: int
    def __init__(self, limit: _Optional[str] = ..., limit_value: _Optional[int] = ..., value: _Optional[int] = ..., unit: _Optional[str] = ...) -> None: ...
