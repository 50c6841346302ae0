"""Files on a host, read and written safely: part of the helper set (plugin_utils/sglang_programs.py, HELPER_MODULES).

Regular files only, never through a link or a FIFO someone planted; atomic replacement; the digest of a file by
its bytes; the results other parts of the collection leave in the layout's status_dir. Standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
import tempfile
from typing import Any


class UnsafeFileError(ValueError):
    """A managed path that is a link, a FIFO or anything else but a regular file: never read or written through."""


def _open(path: str, follow: bool) -> int | None:
    """A descriptor of path, None when it does not exist: never blocks on a FIFO, never follows a final link unless
    `follow`."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        return None


def read_regular(path: str, limit: int | None = None, follow: bool = False) -> bytes | None:
    """The bytes of a regular file, None when it does not exist.

    Opened without blocking (a FIFO planted at the path cannot hang the reader) and, unless `follow`, without
    following a symbolic link at the last component; anything but a regular file raises UnsafeFileError.
    """
    try:
        handle = _open(path, follow)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeFileError(
                f"{path} is a symbolic link; the collection reads and writes only regular files"
            ) from None
        raise
    if handle is None:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{path} is not a regular file (mode {stat.filemode(info.st_mode)})")
        if limit is not None and info.st_size > limit:
            raise UnsafeFileError(f"{path} is larger than {limit} bytes")
        chunks = []
        while True:
            chunk = os.read(handle, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(handle)


def load(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed config, raw text), or (None, None) when the file does not exist. Refuses links and non-files."""
    raw = read_regular(path)
    if raw is None:
        return None, None
    text = raw.decode("utf-8")
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return config, text


def write_atomic(path: str, text: str, mode: int = 0o644, like: str | None = None) -> None:
    """Replace path with text in one rename; keeps the owner and mode of `like` when it is a regular file.

    The temporary file has a random name in the same folder and is created with O_EXCL (never through a link
    someone planted); the rename replaces whatever is at path (a link itself, not its target).
    """
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            info = os.lstat(like) if like and os.path.lexists(like) else None
            if info is not None and stat.S_ISREG(info.st_mode):
                os.fchmod(out.fileno(), info.st_mode & 0o7777)
                os.fchown(out.fileno(), info.st_uid, info.st_gid)
            else:
                os.fchmod(out.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


# Results other parts of the collection leave for the metrics in the layout's status_dir (roles/sglang_common, passed
# on every command line): heal.json (each heal), rollout.json (each apply).
def write_status(status_dir: str, name: str, entry: dict[str, Any]) -> None:
    os.makedirs(status_dir, mode=0o755, exist_ok=True)
    write_atomic(os.path.join(status_dir, name), json.dumps(entry, sort_keys=True) + "\n", mode=0o644)


def read_status(status_dir: str, name: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(status_dir, name), encoding="utf-8") as handle:
            entry = json.load(handle)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


KEYED = "hmac-sha256:"


def keyed_digest(data: bytes, key: str) -> str:
    """A key file's digest as the controller sends it: an HMAC under a key of the run's own, never a plain sha256
    that would let anyone who reads the module's arguments test guesses of the key offline."""
    return KEYED + hmac.new(key.encode(), data, hashlib.sha256).hexdigest()


# The most a digest reads: far above any file a service starts from (DeepSeek's tokenizer.json is a few MB), and a
# bound on a file that never ends.
MAX_DIGEST_BYTES = 1 << 30


def file_digest(path: str, follow: bool = True, limit: int = MAX_DIGEST_BYTES) -> str | None:
    """sha256 of a regular file's bytes, None when it does not exist. Modification times decide nothing.

    A FIFO, a device or a folder at the path gets a digest of its own kind (never read, so never blocks); a file
    longer than `limit` bytes gets one too. A link is followed (a model directory of the Hub's cache is links
    into its blobs) only to a file its own owner could read as well: root never reads, for anyone who can plant a
    link, a file that account could not (a link to a 0600 file of root's gets no digest of its content)."""
    digest = hashlib.sha256()
    try:
        link = os.lstat(path) if follow else None
        handle = _open(path, follow)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"unreadable:{errno.errorcode.get(error.errno, error.errno)}"
    if handle is None:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return f"not-a-file:{stat.filemode(info.st_mode)}"
        if link is not None and stat.S_ISLNK(link.st_mode) and not _readable_by(info, link.st_uid):
            return f"unreadable:link-to-a-file-its-owner-cannot-read:{stat.filemode(info.st_mode)}"
        read = 0
        for block in iter(lambda: os.read(handle, 1 << 20), b""):
            read += len(block)
            if read > limit:
                return f"too-large:over-{limit}-bytes"
            digest.update(block)
    finally:
        os.close(handle)
    return digest.hexdigest()


def _readable_by(info: os.stat_result, uid: int) -> bool:
    """Whether the account `uid` may read a file of this status by its mode (owner or every account)."""
    if uid == 0 or info.st_mode & stat.S_IROTH:
        return True
    return info.st_uid == uid and bool(info.st_mode & stat.S_IRUSR)


def unsafe_folder(path: str) -> str | None:
    """Why root must not write into this folder, or None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return f"{path} does not exist"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder (mode {stat.filemode(info.st_mode)})"
    if info.st_uid != 0:
        return f"{path} is owned by uid {info.st_uid}, not root"
    if info.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.filemode(info.st_mode)})"
    return None
