"""Zero-copy torch tensors from safetensors files: the Python end of weightcast.

Opens any safetensors file (a Hugging Face checkpoint, a ``weightcast load --format shm`` output under
/dev/shm, a pre-sharded rank file) or a directory of them, and returns torch tensors that point into a
memory mapping of the file: no byte is read or copied until a tensor is used, and many processes mapping
the same file in /dev/shm share one copy of the weights.

How data moves: the file is mapped once (``mmap``); the header is parsed and checked as hostile input
with the same rules and error codes as weightcast's TypeScript parser (``src/format/safetensors.ts``);
each tensor is then ``torch.frombuffer`` over its byte range of the mapping, reshaped. The mapping is
private copy-on-write by default, so a tensor written in place never changes the file or another
process's view. Every tensor holds a reference to the mapping, which is unmapped only when the
``SafetensorsFile`` and every tensor built from it are gone; nothing ever unmaps it under a live tensor.

Two cases cannot be zero-copy and are flagged instead: a tensor whose offset in the file is not a
multiple of its element size is copied into an aligned buffer (``TensorInfo.copied``), and a dtype the
installed torch lacks (FP8 before torch 2.1, the sub-byte F4/F6 types, unsigned 16/32/64-bit before
torch 2.3) comes back as a ``RawTensor``: its bytes as a uint8 tensor, still zero-copy, plus the
safetensors dtype name.

The file must not be truncated while it is mapped (the kernel would kill the process on access).
weightcast writes shared-memory files completely before giving them their final names.

Standard library plus torch; numpy is not needed. Errors are ``WeightcastReaderError`` with a stable
``code`` string; match on the code, never on the message.

Command line: ``python3 weightcast_reader.py PATH... --summary`` prints one JSON line per tensor
(name, dtype, shape, SHA-256 of its bytes, the float64 sum of its first elements, zero-copy flags).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import mmap
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

# Imported on first use (see require_torch): checking a header needs no torch, and importing it takes
# seconds, which a command that only rejects a bad file should not pay.
torch: Any = None

__all__ = [
    "DTYPE_BITS",
    "HEADER_BYTES_MAX",
    "ModelDir",
    "RawTensor",
    "SafetensorsFile",
    "TensorInfo",
    "WeightcastReaderError",
    "load_file",
    "open_dir",
    "require_torch",
    "open_file",
]

# Limits, as in weightcast's TypeScript side: fail loudly at a limit rather than trust a size from a file.
HEADER_BYTES_MAX = 100_000_000
LENGTH_PREFIX_BYTES = 8
INDEX_BYTES_MAX = 64 * 1024 * 1024
INDEX_FILE_NAME = "model.safetensors.index.json"
FILES_PER_DIR_MAX = 100_000
PATH_BYTES_MAX = 1024
METADATA_KEY = "__metadata__"
U64_MAX = 2**64 - 1
# Dimensions are exact in JavaScript numbers only up to 2^53-1; the TypeScript parser refuses larger.
DIMENSION_MAX = 2**53 - 1
JSON_WHITESPACE = " \t\n\r"

# Safetensors dtype -> (bits per element, name of the torch dtype that holds it, if any).
_DTYPES: Dict[str, Tuple[int, Optional[str]]] = {
    "BOOL": (8, "bool"),
    "F4": (4, None),
    "F6_E2M3": (6, None),
    "F6_E3M2": (6, None),
    "U8": (8, "uint8"),
    "I8": (8, "int8"),
    "F8_E5M2": (8, "float8_e5m2"),
    "F8_E4M3": (8, "float8_e4m3fn"),
    "F8_E8M0": (8, "float8_e8m0fnu"),
    "F8_E4M3FNUZ": (8, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": (8, "float8_e5m2fnuz"),
    "I16": (16, "int16"),
    "U16": (16, "uint16"),
    "F16": (16, "float16"),
    "BF16": (16, "bfloat16"),
    "I32": (32, "int32"),
    "U32": (32, "uint32"),
    "F32": (32, "float32"),
    "C64": (64, "complex64"),
    "F64": (64, "float64"),
    "I64": (64, "int64"),
    "U64": (64, "uint64"),
}
DTYPE_BITS: Dict[str, int] = {name: bits for name, (bits, _) in _DTYPES.items()}


class WeightcastReaderError(Exception):
    """The one error this module raises on purpose. ``code`` is stable; ``file`` and ``tensor`` say where.

    Codes: the ``SAFETENSORS_*`` codes of weightcast's TypeScript parser (HEADER_TOO_SMALL,
    HEADER_TOO_LARGE, INVALID_HEADER_LENGTH, INVALID_UTF8, INVALID_HEADER_START, INVALID_JSON,
    INVALID_TENSOR_INFO, INVALID_METADATA, UNKNOWN_DTYPE, DUPLICATE_TENSOR, INVALID_OFFSET, OVERFLOW,
    TENSOR_SIZE_MISMATCH, MISALIGNED_SLICE, INCOMPLETE_BUFFER, TRUNCATED), plus ``INDEX_INVALID`` (a
    bad model.safetensors.index.json), ``IO`` (cannot open, stat or map), ``NOT_FOUND`` (no such tensor,
    or a directory without safetensors files), ``TORCH_MISSING`` and ``UNSUPPORTED_PLATFORM``
    (a big-endian host, which would need a byte swap and so a copy).
    """

    def __init__(self, code: str, message: str, file: Optional[str] = None, tensor: Optional[str] = None):
        super().__init__(message)
        self.code = code
        self.file = file
        self.tensor = tensor

    def __str__(self) -> str:
        return f"{self.code}: {super().__str__()}"


def _fail(code: str, file: str, problem: str, tensor: Optional[str] = None) -> WeightcastReaderError:
    if tensor is None:
        return WeightcastReaderError(code, f"{file}: {problem}", file=file)
    return WeightcastReaderError(code, f"{file}: tensor {json.dumps(tensor)}: {problem}", file=file, tensor=tensor)


@dataclass(frozen=True)
class TensorInfo:
    """One header entry, checked. ``start`` and ``end`` are absolute file offsets, end exclusive."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    data_offsets: Tuple[int, int]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def itemsize(self) -> int:
        """Bytes per element, rounded up for the sub-byte types (which are never viewed per element)."""
        return max(1, DTYPE_BITS[self.dtype] // 8)

    @property
    def aligned(self) -> bool:
        """Whether the tensor starts at a multiple of its element size, so it can be viewed in place."""
        return self.start % self.itemsize == 0


class RawTensor(NamedTuple):
    """A tensor of a dtype the installed torch cannot hold: its bytes (uint8, zero-copy) and what they are.

    ``data`` has the tensor's shape for 8-bit types (FP8 bytes line up one to one with elements) and is
    flat otherwise.
    """

    data: Any
    dtype: str
    shape: Tuple[int, ...]


TensorLike = Union[Any, RawTensor]


# ---------------------------------------------------------------------------------------------------
# Header parsing: pure functions over bytes, no torch, no file.


class _Pairs(list):
    """A JSON object as its list of (key, value) pairs, so duplicate keys stay visible."""


def _reject_constant(text: str) -> Any:
    raise ValueError(f"{text} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_header_length(prefix: bytes, file_size: int, file: str) -> int:
    """Decodes and checks the 8-byte little-endian prefix; returns N, the JSON header's length."""
    if min(len(prefix), file_size) < LENGTH_PREFIX_BYTES:
        available = min(len(prefix), file_size)
        raise _fail("SAFETENSORS_HEADER_TOO_SMALL", file, f"{available} bytes, too short for the 8-byte header length")
    length = int.from_bytes(prefix[:LENGTH_PREFIX_BYTES], "little")
    if length > HEADER_BYTES_MAX:
        raise _fail("SAFETENSORS_HEADER_TOO_LARGE", file, f"header length {length} is over {HEADER_BYTES_MAX} bytes")
    if LENGTH_PREFIX_BYTES + length > file_size:
        raise _fail(
            "SAFETENSORS_INVALID_HEADER_LENGTH",
            file,
            f"header length {length} runs past the end of the {file_size}-byte file",
        )
    return length


def parse_header(header: bytes, file_size: int, file: str) -> Tuple[List[TensorInfo], Optional[Dict[str, str]]]:
    """Checks the N header bytes against a file of ``file_size`` bytes.

    Returns the tensors in file order and the metadata. The rules are the reference implementation's
    (huggingface/safetensors): the data buffer is covered exactly, in order, without gaps or overlaps,
    and each tensor is exactly as long as its dtype and shape say. A name used twice is refused.
    """
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail("SAFETENSORS_INVALID_UTF8", file, "header is not valid UTF-8") from error
    stripped = text.lstrip(JSON_WHITESPACE)
    if stripped == "":
        raise _fail("SAFETENSORS_INVALID_JSON", file, "header is empty")
    if not stripped.startswith("{"):
        raise _fail(
            "SAFETENSORS_INVALID_HEADER_START",
            file,
            f"header must be a JSON object, starts with {json.dumps(stripped[0])}",
        )
    try:
        top = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_constant=_reject_constant,
            parse_float=_parse_float,
        )
    except (ValueError, RecursionError) as error:
        raise _fail("SAFETENSORS_INVALID_JSON", file, f"header is not valid JSON: {error}") from error
    declared: List[Tuple[str, str, List[int], int, int]] = []
    metadata: Optional[Dict[str, str]] = None
    seen = set()
    for name, value in top:
        if name in seen:
            if name == METADATA_KEY:
                raise _fail("SAFETENSORS_INVALID_METADATA", file, f"{METADATA_KEY} appears twice")
            raise _fail("SAFETENSORS_DUPLICATE_TENSOR", file, "name appears twice in the header", name)
        seen.add(name)
        if name == METADATA_KEY:
            metadata = _read_metadata(value, file)
        else:
            declared.append(_read_tensor_info(name, value, file))
    data_start = LENGTH_PREFIX_BYTES + len(header)
    return _lay_out(declared, data_start, file_size, file), metadata


def _read_metadata(value: Any, file: str) -> Optional[Dict[str, str]]:
    if value is None:
        return None
    if not isinstance(value, _Pairs):
        raise _fail("SAFETENSORS_INVALID_METADATA", file, f"{METADATA_KEY} must be an object of strings")
    result: Dict[str, str] = {}
    for key, entry in value:  # a repeated key keeps its last value, as serde does
        if not isinstance(entry, str):
            problem = f"{METADATA_KEY} value of {json.dumps(key)} is not a string"
            raise _fail("SAFETENSORS_INVALID_METADATA", file, problem)
        if _has_lone_surrogate(key) or _has_lone_surrogate(entry):
            raise _fail("SAFETENSORS_INVALID_JSON", file, f"{METADATA_KEY} has an unpaired surrogate escape")
        result[key] = entry
    return result


def _read_tensor_info(name: str, value: Any, file: str) -> Tuple[str, str, List[int], int, int]:
    if _has_lone_surrogate(name):
        raise _fail("SAFETENSORS_INVALID_JSON", file, "name has an unpaired surrogate escape", name)
    if not isinstance(value, _Pairs):
        problem = "entry must be an object: dtype, shape, data_offsets"
        raise _fail("SAFETENSORS_INVALID_TENSOR_INFO", file, problem, name)
    fields: Dict[str, Any] = {}
    for key, entry in value:
        if key in ("dtype", "shape", "data_offsets"):
            if key in fields:
                raise _fail("SAFETENSORS_INVALID_TENSOR_INFO", file, f"field {key} appears twice", name)
            fields[key] = entry
        elif _has_lone_surrogate(key):  # unknown fields are ignored, but must still be valid JSON text
            problem = f"field {json.dumps(key)} has an unpaired surrogate escape"
            raise _fail("SAFETENSORS_INVALID_JSON", file, problem, name)
    for key in ("dtype", "shape", "data_offsets"):
        if key not in fields:
            raise _fail("SAFETENSORS_INVALID_TENSOR_INFO", file, f"field {key} is missing", name)
    dtype = fields["dtype"]
    if not isinstance(dtype, str):
        raise _fail("SAFETENSORS_INVALID_TENSOR_INFO", file, "dtype must be a string", name)
    if dtype not in _DTYPES:
        raise _fail("SAFETENSORS_UNKNOWN_DTYPE", file, f"unknown dtype {json.dumps(dtype)}", name)
    shape = _unsigned_list(fields["shape"], "shape", file, name)
    offsets = _unsigned_list(fields["data_offsets"], "data_offsets", file, name)
    if len(offsets) != 2:
        raise _fail("SAFETENSORS_INVALID_TENSOR_INFO", file, "data_offsets must be [begin, end]", name)
    return name, dtype, shape, offsets[0], offsets[1]


def _unsigned_list(value: Any, key: str, file: str, name: str) -> List[int]:
    # bool is a subclass of int in Python; JSON true is not an integer.
    valid = isinstance(value, list) and all(
        type(item) is int and 0 <= item <= U64_MAX for item in value  # noqa: E721 (exact type on purpose)
    )
    if not valid:
        found = json.dumps(value)[:200] if not isinstance(value, _Pairs) else "an object"
        problem = f"{key} must be an array of integers from 0 to 2^64-1, got {found}"
        raise _fail("SAFETENSORS_INVALID_TENSOR_INFO", file, problem, name)
    return list(value)


def _lay_out(
    declared: List[Tuple[str, str, List[int], int, int]], data_start: int, file_size: int, file: str
) -> List[TensorInfo]:
    """Walks the data buffer front to back in offset order (ties keep header order)."""
    ordered = sorted(declared, key=lambda entry: (entry[3], entry[4]))
    cursor = 0
    previous: Optional[str] = None
    for name, dtype, shape, begin, end in ordered:
        if begin != cursor or end < begin:
            before = "the start of the data" if previous is None else f"tensor {json.dumps(previous)}"
            offsets = f"data_offsets [{begin}, {end}]"
            if end < begin:
                problem = f"{offsets} end before they begin"
            elif begin > cursor:
                problem = f"{offsets} leave a gap of {begin - cursor} bytes after {before}"
            else:
                problem = f"{offsets} overlap {before}, which ends at {cursor}"
            raise _fail("SAFETENSORS_INVALID_OFFSET", file, problem, name)
        _check_byte_size(name, dtype, shape, begin, end, file)
        cursor = end
        previous = name
    data_bytes = file_size - data_start
    if cursor > data_bytes:
        cut = next(entry[0] for entry in ordered if entry[4] > data_bytes)
        problem = f"file is truncated: the data buffer has {data_bytes} bytes but the tensors need {cursor}"
        raise _fail("SAFETENSORS_TRUNCATED", file, problem, cut)
    if cursor < data_bytes:
        problem = f"{data_bytes - cursor} bytes after the last tensor belong to no tensor"
        raise _fail("SAFETENSORS_INCOMPLETE_BUFFER", file, problem)
    infos = []
    for name, dtype, shape, begin, end in ordered:
        for dim in shape:
            if dim > DIMENSION_MAX:
                raise _fail("SAFETENSORS_OVERFLOW", file, f"dimension {dim} is over 2^53-1", name)
        infos.append(TensorInfo(name, dtype, tuple(shape), (begin, end), data_start + begin, data_start + end))
    return infos


def _check_byte_size(name: str, dtype: str, shape: List[int], begin: int, end: int, file: str) -> None:
    described = f"{dtype} {list(shape)}"
    elements = 1
    for dim in shape:
        elements *= dim
        if elements > U64_MAX:
            raise _fail("SAFETENSORS_OVERFLOW", file, f"{described} has over 2^64 elements", name)
    bits = elements * DTYPE_BITS[dtype]
    if bits > U64_MAX:
        raise _fail("SAFETENSORS_OVERFLOW", file, f"{described} has over 2^64 bits", name)
    if bits % 8 != 0:
        raise _fail("SAFETENSORS_MISALIGNED_SLICE", file, f"{described} is {bits} bits, not whole bytes", name)
    if bits // 8 != end - begin:
        held = f"data_offsets [{begin}, {end}] hold {end - begin}"
        raise _fail("SAFETENSORS_TENSOR_SIZE_MISMATCH", file, f"{described} needs {bits // 8} bytes but {held}", name)


# ---------------------------------------------------------------------------------------------------
# Files: the mapping and the tensors over it.


def require_torch() -> Any:
    """The torch module, imported now if it was not yet; TORCH_MISSING when this Python has none."""
    global torch
    if torch is None:
        try:
            import torch as module
        except ImportError as error:
            message = f"torch is not installed for this Python interpreter ({sys.executable})"
            raise WeightcastReaderError("TORCH_MISSING", message) from error
        torch = module
    return torch


def torch_dtype_for(dtype: str) -> Optional[Any]:
    """The torch dtype that holds a safetensors dtype in this torch version, or None (raw bytes)."""
    torch_module = require_torch()
    bits, attribute = _DTYPES[dtype]
    if attribute is None or bits < 8:
        return None
    return getattr(torch_module, attribute, None)


class SafetensorsFile:
    """One mapped, validated safetensors file. Tensors built from it keep the mapping alive.

    ``writable=True`` (the default) maps the file private copy-on-write: tensors can be written in place
    and only the pages written are copied, never the file. ``writable=False`` maps it read-only; torch
    then builds tensors it must not write to (writing would crash the process), in exchange for no
    commit charge under strict overcommit.
    """

    def __init__(self, path: Union[str, os.PathLike], writable: bool = True):
        self.path = os.fspath(path)
        self.copied: List[str] = []
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < LENGTH_PREFIX_BYTES:
                    parse_header_length(handle.read(size), size, self.path)
                access = mmap.ACCESS_COPY if writable else mmap.ACCESS_READ
                # The mapping outlives the descriptor: mmap keeps its own duplicate.
                mapping = mmap.mmap(handle.fileno(), 0, access=access)
        except OSError as error:
            raise WeightcastReaderError("IO", f"{self.path}: cannot open: {error}", file=self.path) from error
        self.size = size
        self._mapping: Optional[mmap.mmap] = mapping
        self._writable = writable
        length = parse_header_length(mapping[:LENGTH_PREFIX_BYTES], size, self.path)
        header = mapping[LENGTH_PREFIX_BYTES : LENGTH_PREFIX_BYTES + length]
        infos, self.metadata = parse_header(header, size, self.path)
        self.data_start = LENGTH_PREFIX_BYTES + length
        self.infos: Dict[str, TensorInfo] = {info.name: info for info in infos}
        self._base_address = _buffer_address(mapping) if writable else _mapped_address(self.path, size)

    def __enter__(self) -> "SafetensorsFile":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def keys(self) -> List[str]:
        """Tensor names in file order."""
        return list(self.infos)

    @property
    def mapping_range(self) -> Optional[Tuple[int, int]]:
        """The mapping's address range [start, end), for checking that a tensor points into it."""
        if self._base_address is None:
            return None
        return self._base_address, self._base_address + self.size

    def tensor(self, name: str) -> TensorLike:
        """A torch tensor over the mapping (or a RawTensor); copied only if misaligned (see ``copied``)."""
        info = self.infos.get(name)
        if info is None:
            raise _fail("NOT_FOUND", self.path, "no such tensor in this file", name)
        mapping = self._live_mapping()
        torch_module = require_torch()
        if sys.byteorder != "little" and info.itemsize > 1:
            raise _fail("UNSUPPORTED_PLATFORM", self.path, "safetensors data is little-endian; this host is not", name)
        target = torch_dtype_for(info.dtype)
        if info.nbytes == 0:
            empty = torch_module.empty(info.shape, dtype=target if target is not None else torch_module.uint8)
            return empty if target is not None else RawTensor(empty, info.dtype, info.shape)
        if target is None:
            data = torch_module.frombuffer(mapping, dtype=torch_module.uint8, count=info.nbytes, offset=info.start)
            if DTYPE_BITS[info.dtype] == 8:
                data = data.reshape(info.shape)
            return RawTensor(data, info.dtype, info.shape)
        if info.aligned:
            flat = self._frombuffer(mapping, target, info.nbytes // info.itemsize, info.start)
        else:
            # A misaligned element pointer is undefined behaviour for many kernels: copy once, aligned.
            aligned = bytearray(mapping[info.start : info.end])
            flat = torch_module.frombuffer(aligned, dtype=target)
            self.copied.append(name)
        return flat.reshape(info.shape)

    def tensors(self) -> Dict[str, TensorLike]:
        return {name: self.tensor(name) for name in self.infos}

    def close(self) -> None:
        """Drops this object's reference to the mapping. Live tensors keep it mapped until they are freed.

        The mapping is never closed explicitly: torch.frombuffer keeps a reference to the mmap object but
        no buffer export, so an explicit close would unmap memory under live tensors.
        """
        self._mapping = None

    def _live_mapping(self) -> mmap.mmap:
        if self._mapping is None:
            raise WeightcastReaderError("IO", f"{self.path}: file is closed", file=self.path)
        return self._mapping

    def _frombuffer(self, mapping: mmap.mmap, target: Any, count: int, offset: int) -> Any:
        torch_module = require_torch()
        if self._writable:
            return torch_module.frombuffer(mapping, dtype=target, count=count, offset=offset)
        import warnings

        with warnings.catch_warnings():
            # A read-only mapping is what was asked for; torch's warning about it would only be noise.
            warnings.simplefilter("ignore", UserWarning)
            return torch_module.frombuffer(mapping, dtype=target, count=count, offset=offset)


def _buffer_address(mapping: mmap.mmap) -> Optional[int]:
    """The address of a writable mapping's first byte. The probe's buffer export ends with the probe."""
    if len(mapping) == 0:
        return None
    probe = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(probe)
    del probe
    return address


def _mapped_address(path: str, size: int) -> Optional[int]:
    """A read-only mapping has no writable buffer to probe; /proc/self/maps names its range instead."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/maps", "r", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].strip() == real and fields[2] == "00000000":
                    start, end = (int(part, 16) for part in fields[0].split("-"))
                    if end - start >= size:
                        return start
    except OSError:
        return None
    return None


def open_file(path: Union[str, os.PathLike], writable: bool = True) -> SafetensorsFile:
    return SafetensorsFile(path, writable=writable)


def load_file(path: Union[str, os.PathLike], writable: bool = True) -> Dict[str, TensorLike]:
    """All tensors of one file, zero-copy. The dict's tensors keep the mapping alive."""
    with SafetensorsFile(path, writable=writable) as file:
        return file.tensors()


# ---------------------------------------------------------------------------------------------------
# Directories: every *.safetensors file, or the files model.safetensors.index.json names.


def _safe_relative_path_problem(path: Any) -> Optional[str]:
    if not isinstance(path, str) or path == "":
        return "is empty"
    if _has_lone_surrogate(path):
        return "has an unpaired surrogate"
    if len(path.encode("utf-8")) > PATH_BYTES_MAX:
        return f"is longer than {PATH_BYTES_MAX} bytes"
    if "\0" in path:
        return "contains a NUL byte"
    if "\\" in path:
        return "contains a backslash"
    if path.startswith("/"):
        return "is absolute"
    if len(path) >= 2 and path[1] == ":" and path[0].isascii() and path[0].isalpha():
        return "has a drive letter"
    for segment in path.split("/"):
        if segment == "":
            return "has an empty segment"
        if segment in (".", ".."):
            return f"has a '{segment}' segment"
    return None


def read_index(path: str) -> Dict[str, str]:
    """The weight map of a model.safetensors.index.json: tensor name to shard file, shard names checked."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(INDEX_BYTES_MAX + 1)
    except OSError as error:
        raise WeightcastReaderError("IO", f"{path}: cannot read: {error}", file=path) from error
    if len(raw) > INDEX_BYTES_MAX:
        raise _fail("INDEX_INVALID", path, f"index is larger than {INDEX_BYTES_MAX} bytes")
    try:
        parsed = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise _fail("INDEX_INVALID", path, f"not valid JSON: {error}") from error
    weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
    metadata = parsed.get("metadata", {}) if isinstance(parsed, dict) else None
    if not isinstance(weight_map, dict) or not isinstance(metadata, dict):
        raise _fail("INDEX_INVALID", path, "not a safetensors index: needs an object weight_map (and metadata)")
    for tensor, shard in weight_map.items():
        problem = _safe_relative_path_problem(shard) if isinstance(shard, str) else "is not a string"
        if problem is not None:
            raise _fail("INDEX_INVALID", path, f"shard {json.dumps(shard)} {problem}", tensor)
    return dict(weight_map)


class ModelDir:
    """The safetensors files of one directory, opened and mapped, with one namespace of tensor names.

    With a model.safetensors.index.json the index is authoritative: exactly the files it names are
    opened, and every tensor must sit in the shard the index says. Without one, every ``*.safetensors``
    file directly in the directory is opened. A tensor name found in two files is an error.
    """

    def __init__(self, path: Union[str, os.PathLike], writable: bool = True):
        self.path = os.fspath(path)
        index_path = os.path.join(self.path, INDEX_FILE_NAME)
        self.weight_map: Optional[Dict[str, str]] = read_index(index_path) if os.path.isfile(index_path) else None
        names = sorted(set(self.weight_map.values())) if self.weight_map is not None else self._listed_files()
        if len(names) > FILES_PER_DIR_MAX:
            raise _fail("IO", self.path, f"more than {FILES_PER_DIR_MAX} safetensors files")
        if not names:
            raise _fail("NOT_FOUND", self.path, "no safetensors files in this directory")
        self.files: Dict[str, SafetensorsFile] = {}
        self.owner: Dict[str, str] = {}
        for name in names:
            file = SafetensorsFile(os.path.join(self.path, name), writable=writable)
            self.files[name] = file
            for tensor in file.infos:
                if tensor in self.owner:
                    raise _fail(
                        "SAFETENSORS_DUPLICATE_TENSOR", file.path, f"also in {self.owner[tensor]}", tensor
                    )
                self.owner[tensor] = name
        if self.weight_map is not None:
            self._check_index(index_path)

    def _listed_files(self) -> List[str]:
        try:
            entries = os.listdir(self.path)
        except OSError as error:
            raise WeightcastReaderError("IO", f"{self.path}: cannot list: {error}", file=self.path) from error
        return sorted(
            entry
            for entry in entries
            if entry.endswith(".safetensors") and os.path.isfile(os.path.join(self.path, entry))
        )

    def _check_index(self, index_path: str) -> None:
        assert self.weight_map is not None
        for tensor, shard in self.weight_map.items():
            if self.owner.get(tensor) != shard:
                raise _fail("INDEX_INVALID", index_path, f"the index says {shard} holds it, but it does not", tensor)
        for tensor, shard in self.owner.items():
            if tensor not in self.weight_map:
                raise _fail("INDEX_INVALID", index_path, f"{shard} holds it but the index does not list it", tensor)

    def __enter__(self) -> "ModelDir":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def keys(self) -> List[str]:
        return list(self.owner)

    def file_of(self, name: str) -> SafetensorsFile:
        shard = self.owner.get(name)
        if shard is None:
            raise _fail("NOT_FOUND", self.path, "no such tensor in this directory", name)
        return self.files[shard]

    def tensor(self, name: str) -> TensorLike:
        return self.file_of(name).tensor(name)

    def tensors(self) -> Dict[str, TensorLike]:
        return {name: self.tensor(name) for name in self.owner}

    def items(self) -> Iterator[Tuple[str, SafetensorsFile, TensorLike]]:
        for name in self.owner:
            file = self.file_of(name)
            yield name, file, file.tensor(name)

    def close(self) -> None:
        for file in self.files.values():
            file.close()


def open_dir(path: Union[str, os.PathLike], writable: bool = True) -> ModelDir:
    return ModelDir(path, writable=writable)


# ---------------------------------------------------------------------------------------------------
# Summary: what the command line prints and the tests compare with the TypeScript side.


def _tensor_bytes(tensor: Any) -> Any:
    """The tensor's bytes as a ctypes array at its own address: no copy, for hashing."""
    nbytes = tensor.numel() * tensor.element_size()
    return (ctypes.c_char * nbytes).from_address(tensor.data_ptr())


def _decode_e4m3(bits: int) -> float:
    sign = -1.0 if bits & 0x80 else 1.0
    exponent, mantissa = (bits >> 3) & 0x0F, bits & 0x07
    if exponent == 0x0F and mantissa == 0x07:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0**-9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def _decode_e5m2(bits: int) -> float:
    sign = -1.0 if bits & 0x80 else 1.0
    exponent, mantissa = (bits >> 2) & 0x1F, bits & 0x03
    if exponent == 0x1F:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * mantissa * 2.0**-16
    return sign * (1 + mantissa / 4) * 2.0 ** (exponent - 15)


def _decode_e8m0(bits: int) -> float:
    return math.nan if bits == 0xFF else 2.0 ** (bits - 127)


_RAW_DECODERS = {"F8_E4M3": _decode_e4m3, "F8_E5M2": _decode_e5m2, "F8_E8M0": _decode_e8m0}


def first_values(value: TensorLike, count: int) -> Optional[List[float]]:
    """The first ``count`` elements as Python floats, or None where a float is not meaningful (complex)."""
    if isinstance(value, RawTensor):
        raw = bytes(_tensor_bytes(value.data)) if value.data.numel() > 0 else b""
        decoder = _RAW_DECODERS.get(value.dtype)
        if decoder is not None:
            return [decoder(byte) for byte in raw[:count]]
        if value.dtype in ("U16", "U32", "U64"):
            width = DTYPE_BITS[value.dtype] // 8
            usable = min(count, len(raw) // width)
            return [float(int.from_bytes(raw[i * width : (i + 1) * width], "little")) for i in range(usable)]
        return None
    if value.is_complex():
        return None
    flat = value.reshape(-1)[:count]
    if flat.dtype.is_floating_point and flat.element_size() == 1:
        # torch's FP8 types become Python numbers only through a wider type.
        flat = flat.to(require_torch().float32)
    return [float(item) for item in flat.tolist()]


def _storage_of(tensor: Any) -> Any:
    """The tensor's storage; ``untyped_storage`` from torch 2.0, where ``storage()`` is deprecated."""
    untyped = getattr(tensor, "untyped_storage", None)
    return untyped() if untyped is not None else tensor.storage()


def _json_number(value: float) -> Union[float, str]:
    return value if math.isfinite(value) else str(value)


def describe(name: str, file: SafetensorsFile, value: TensorLike, first: int) -> Dict[str, Any]:
    info = file.infos[name]
    data = value.data if isinstance(value, RawTensor) else value
    digest = hashlib.sha256(_tensor_bytes(data) if info.nbytes > 0 else b"").hexdigest()
    values = first_values(value, first)
    total = None
    if values is not None:
        total = 0.0
        for item in values:  # in order, like the TypeScript side, so the sums agree exactly
            total += item
    mapping = file.mapping_range
    in_mapping = None
    if info.nbytes > 0 and mapping is not None:
        in_mapping = mapping[0] <= data.data_ptr() and data.data_ptr() + info.nbytes <= mapping[1]
    storage_ptr = _storage_of(data).data_ptr() if info.nbytes > 0 else None
    return {
        "path": file.path,
        "file": os.path.basename(file.path),
        "name": name,
        "dtype": info.dtype,
        "torch_dtype": None if isinstance(value, RawTensor) else str(value.dtype).replace("torch.", ""),
        "raw": isinstance(value, RawTensor),
        "shape": list(info.shape),
        "bytes": info.nbytes,
        "sha256": digest,
        "first_count": None if values is None else len(values),
        "first_sum": None if total is None else _json_number(total),
        "copied": name in file.copied,
        "in_mapping": in_mapping,
        "offset_in_mapping": None if not in_mapping or mapping is None else data.data_ptr() - mapping[0],
        "storage_in_mapping": None
        if storage_ptr is None or mapping is None
        else mapping[0] <= storage_ptr < mapping[1],
    }


def _entries(path: str) -> Iterator[Tuple[str, SafetensorsFile, TensorLike]]:
    if os.path.isdir(path):
        model = ModelDir(path)
        yield from model.items()
    else:
        file = SafetensorsFile(path)
        for name in file.infos:
            yield name, file, file.tensor(name)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Open safetensors files zero-copy and describe their tensors.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a .safetensors file or a directory of them")
    parser.add_argument("--summary", action="store_true", help="one JSON line per tensor (checksums, flags)")
    parser.add_argument("--first", type=int, default=16, help="how many leading elements first_sum adds")
    args = parser.parse_args(argv)
    try:
        for name, file, value in (entry for path in args.paths for entry in _entries(path)):
            if args.summary:
                print(json.dumps(describe(name, file, value, max(0, args.first)), allow_nan=False))
            else:
                info = file.infos[name]
                print(f"{name}\t{info.dtype}\t{list(info.shape)}\t{os.path.basename(file.path)}")
    except WeightcastReaderError as error:
        print(json.dumps({"error": error.code, "message": error.args[0]}), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Whoever read the output stopped early (`| head`); point stdout at /dev/null so the exit flush
        # does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
