"""Reading untrusted `.npy` column files without trusting their headers.

A manifest's columns are plain `.npy` arrays.  Before a byte of data is read, the header is
parsed (numpy's own parser: a Python literal, never code), and its dtype, shape and order must
equal what the manifest's schema and head declare, and the file's length must equal the
header plus exactly that many items.  Memory is therefore bounded by the declared sizes,
which the head has already checked against limits.  Local files are memory-mapped (the page
cache is shared by every process that opens the pack); remote per-sample columns become
`RangedColumn`s that read only the rows asked for, and small remote files are read whole.
A local file must be a regular file that resolves inside the pack root: a symlink out of
the pack is refused before it is opened, and so is a FIFO (opening one would block).
"""
from __future__ import annotations

import io
import mmap
import os
import stat
import tokenize
import zipfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from corgi_io.errors import ManifestError
from corgi_io.manifest.ranged import PAGE, LazyColumn, RangedColumn

HEADER_READ = 4096 + 16  # magic, version and length field, and the largest header accepted


def most_bytes(expected_dtype, rows: int) -> int:
    """The largest .npy file that can hold `rows` items of `expected_dtype`: read no more than this."""
    return HEADER_READ + rows * np.dtype(expected_dtype).itemsize


def local_file_size(path: str, root: str, where: str) -> int:
    """The size of a local manifest file, refused unless it is a regular file that resolves inside `root`."""
    try:
        real = os.path.realpath(path, strict=True)
        info = os.stat(real)
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    real_root = os.path.realpath(root)
    if os.path.commonpath([real, real_root]) != real_root:
        raise ManifestError(f"{where}: links to {real!r}, outside the pack root")
    if not stat.S_ISREG(info.st_mode):
        raise ManifestError(f"{where}: not a regular file")
    return info.st_size


def checked_size(storage, relpath: str, most: int, where: str) -> int:
    """The size of a manifest file, asked before any of it is read.

    A missing or unreadable file, a local one that is not a regular file inside the root, or
    one larger than `most` bytes is a ManifestError; storage trouble is a StorageError.
    """
    try:
        local = storage.local_path(relpath)
        size = storage.size(relpath) if local is None else local_file_size(local, storage.root, where)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        raise ManifestError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    if size > most:
        raise ManifestError(f"{where}: {size} bytes, more than the {most} it may hold")
    return size


def parse_header(head: bytes, where: str) -> tuple:
    """(dtype, shape, data offset) of an .npy file from its first bytes; ManifestError if malformed."""
    stream = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"unsupported .npy version {version}")
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(stream, max_header_size=HEADER_READ - 16)
    except (ValueError, SyntaxError, TypeError, EOFError, OverflowError, RecursionError, tokenize.TokenError) as exc:
        raise ManifestError(f"{where}: not a valid .npy column ({exc})") from None
    if fortran or dtype.hasobject:
        raise ManifestError(f"{where}: a column must be a plain C-ordered array, not {dtype}")
    return dtype, shape, stream.tell()


def check_column(dtype, shape, data_offset: int, file_size: int, expected_dtype, length, where: str) -> None:
    """Refuse a column whose dtype, shape or file size is not what the schema declares."""
    expected_dtype = np.dtype(expected_dtype).newbyteorder("<")
    if dtype != expected_dtype or len(shape) != 1:
        raise ManifestError(f"{where}: column is {dtype}{tuple(shape)}, expected 1-D {expected_dtype}")
    if length is not None and shape[0] != length:
        raise ManifestError(f"{where}: column has {shape[0]} rows, the head declares {length}")
    if file_size != data_offset + shape[0] * dtype.itemsize:
        raise ManifestError(f"{where}: file is {file_size} bytes, a {shape[0]}-row {dtype} column needs "
                            f"{data_offset + shape[0] * dtype.itemsize}")


def map_local_column(path: str, root: str, expected_dtype, length: int, where: str,
                     scattered: bool = False) -> np.ndarray:
    """A read-only memory map of a local .npy column inside `root`, after its header and size are checked.

    The array is a plain ndarray over an `mmap` of the very descriptor whose header was checked
    (np.memmap's subclass doubles the cost of every scalar the loader reads from a column).
    `scattered` (per-sample columns, which a rank reads block by block all over the file) turns
    the kernel's read-ahead off for the map, so a rank's resident pages are the ones it touched,
    not the megabytes around each; `prefetch` asks for long runs explicitly.
    """
    local_file_size(path, root, where)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            dtype, shape, offset = parse_header(f.read(min(size, HEADER_READ)), where)
            check_column(dtype, shape, offset, size, expected_dtype, length, where)
            if shape[0] == 0:
                return np.zeros(0, dtype=dtype)
            mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            if scattered and hasattr(mmap, "MADV_RANDOM"):
                mapped.madvise(mmap.MADV_RANDOM)
    except OSError as exc:
        raise ManifestError(f"{where}: cannot read column ({exc.strerror or exc})") from None
    return np.frombuffer(mapped, dtype=dtype, count=shape[0], offset=offset)


def open_ranged_column(storage, relpath: str, expected_dtype, length: int, where: str) -> RangedColumn:
    """A remote column that reads rows on demand, after its size and header are checked (two small requests)."""
    size = checked_size(storage, relpath, most_bytes(expected_dtype, length), where)
    try:
        header = storage.read_range(relpath, 0, min(size, HEADER_READ))
    except FileNotFoundError as exc:
        raise ManifestError(f"{where}: cannot read ({exc.strerror or type(exc).__name__})") from None
    dtype, shape, offset = parse_header(header, where)
    check_column(dtype, shape, offset, size, expected_dtype, length, where)
    return RangedColumn(storage, relpath, dtype, shape[0], offset)


def prefetch_rows(columns, start: int, stop: int) -> None:
    """`prefetch` rows [start, stop) of several columns; remote ones are read concurrently (one round trip, not one each)."""
    ranged = [column for column in columns if isinstance(column, LazyColumn) and not column.complete(start, stop)]
    for column in columns:
        if not isinstance(column, LazyColumn):
            prefetch(column, start, stop)
    if len(ranged) > 1:
        with ThreadPoolExecutor(len(ranged), thread_name_prefix="corgi-rows") as pool:
            list(pool.map(lambda column: prefetch(column, start, stop), ranged))
    elif ranged:
        prefetch(ranged[0], start, stop)


def prefetch(column, start: int, stop: int) -> None:
    """Ask for rows [start, stop) of a column before they are used, in one go.

    A remote column reads them (one request per run of missing pages); a memory-mapped one
    asks the kernel to read their pages now (MADV_WILLNEED), which a map without read-ahead
    would otherwise fault in one page at a time.  Anything else is already in memory.
    """
    start, stop = max(0, int(start)), min(int(stop), len(column))
    if isinstance(column, LazyColumn):
        column.fill(start, stop)
        return
    mapped = column.base if isinstance(column, np.ndarray) else None
    mapped = mapped.obj if isinstance(mapped, memoryview) else mapped  # np.frombuffer keeps a memoryview of the map
    if stop <= start or not isinstance(mapped, mmap.mmap) or not hasattr(mmap, "MADV_WILLNEED"):
        return
    skip = column.ctypes.data - np.frombuffer(mapped, np.uint8).ctypes.data  # the .npy header's bytes
    begin = (skip + start * column.itemsize) // PAGE * PAGE
    mapped.madvise(mmap.MADV_WILLNEED, begin, skip + stop * column.itemsize - begin)


def column_from_bytes(raw: bytes, expected_dtype, length, where: str) -> np.ndarray:
    """A column from the whole bytes of an .npy file (remote packs), after the same checks."""
    dtype, shape, offset = parse_header(raw[:HEADER_READ], where)
    check_column(dtype, shape, offset, len(raw), expected_dtype, length, where)
    return np.frombuffer(raw, dtype=dtype, count=shape[0], offset=offset)


def read_npz_members(raw: bytes, where: str) -> dict:
    """{name: bytes of the .npy member} of a version-1 `manifest.npz`, refusing compressed members.

    np.savez stores members uncompressed, so the members together can never be larger than the
    archive: memory stays bounded by the file size, and a zip bomb is refused before inflating.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            infos = archive.infolist()
            if any(info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 for info in infos):
                raise ManifestError(f"{where}: compressed or encrypted members are not allowed in a column file")
            if sum(info.file_size for info in infos) > len(raw):
                raise ManifestError(f"{where}: members claim more bytes than the archive holds")
            return {info.filename.removesuffix(".npy"): archive.read(info) for info in infos}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise ManifestError(f"{where}: unreadable column file ({exc})") from None
