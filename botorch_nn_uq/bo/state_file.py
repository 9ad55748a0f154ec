r"""The file that holds a run's state: its frame, bounded reading, compare-before-write
and the advisory lock.

A state file is a first line naming the format and its version, a second line with the
SHA-256 of the payload, then the payload (what :class:`~botorch_nn_uq.bo.state.RunState`
serialises). This module knows the frame, not the payload:

- :func:`read_state_file` reads only regular files of at most
  :data:`MAX_STATE_FILE_BYTES` (a device such as ``/dev/zero`` would never end) and
  checks the version and the checksum.
- :func:`write_state_file` writes atomically (a hidden temporary file in the same
  folder, flushed to disk, then a rename) and compares before it writes: it replaces a
  file only if the file still holds the state the writer read (its checksum), creates a
  new file only if none appeared meanwhile, and never replaces another file unless told
  to. Temporary files left by a writer that was killed are removed by the next write.
- :func:`locked_state_file` holds an advisory lock (``flock``) on the file for the
  duration of a command, so that commands on one state file run one at a time; a
  command that finds the lock held is refused at once with
  :class:`StateFileBusyError`. Writers take the lock too, so a writer that read the file
  before another command wrote it is refused (:class:`StaleStateFileError`) instead of
  erasing that command's work.

The lock is advisory and local: it serialises the commands and processes of one
machine (and of file systems whose ``flock`` is shared, such as NFS v4), where the
platform has ``flock`` (not on Windows, where only the checks before writing apply).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

#: The first line of a state file starts with this.
STATE_MAGIC = b"botorch-nn-uq run state"
#: Version of the file layout that :func:`write_state_file` writes.
STATE_FORMAT = 3
#: The versions :func:`read_state_file` reads (an older layout is converted by its
#: reader); a file of any other version is refused with an error naming its version.
READABLE_FORMATS = (2, 3)
#: The largest state file read: far above a run's data and its last model's weights,
#: low enough that a wrong path (a disk image, a device) is refused before it is read.
MAX_STATE_FILE_BYTES = 2**32
#: The suffix of the temporary files of a write in progress.
PARTIAL_SUFFIX = ".partial"

#: The locks this process holds, by the locked file's ``(device, inode)``: a write
#: inside :func:`locked_state_file` reuses the command's lock (a second ``flock`` on
#: another descriptor of the same file would conflict with it).
_HELD_LOCKS: dict[tuple[int, int], int] = {}


class StateFileError(ValueError):
    r"""A state file that cannot be loaded or written: not a state file, from another
    version, corrupted, with an unexpected layout, or changed by another command."""


class StateFileBusyError(StateFileError):
    r"""Another command holds the state file's lock."""


class StaleStateFileError(StateFileError):
    r"""The state file changed (or appeared, or vanished) since the writer read it: a
    write would erase another command's work."""


def same_file(first: Path, second: Path) -> bool:
    r"""Whether two paths name the same file, existing or not (links and ``..``
    followed): a writer told to write one of them must not take it for another.

    Example:
        >>> same_file(Path("runs/../run.state"), Path("run.state"))
        True
    """
    with contextlib.suppress(OSError):
        return first.samefile(second)
    return first.absolute().resolve() == second.absolute().resolve()


def state_digest(payload: bytes) -> str:
    r"""The checksum of a payload, as the file's second line holds it (hex SHA-256)."""
    return hashlib.sha256(payload).hexdigest()


def read_state_file(path: str | Path) -> tuple[bytes, str, int]:
    r"""The payload of the state file at ``path``, its checksum and its format version.

    Args:
        path: The state file.

    Returns:
        ``(payload, digest, version)``, the version one of :data:`READABLE_FORMATS`.

    Raises:
        StateFileError: If ``path`` is not a regular file, is larger than
            :data:`MAX_STATE_FILE_BYTES`, is not a state file, is of a version not in
            :data:`READABLE_FORMATS`, or its payload does not match its checksum.
        OSError: If the file cannot be read (e.g. ``FileNotFoundError``).
    """
    name = str(path)
    # Non-blocking, so that opening a FIFO does not wait for a writer.
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise StateFileError(f"{name!r} is not a regular file, so not a run state file.")
    with os.fdopen(descriptor, "rb") as handle:
        if status.st_size > MAX_STATE_FILE_BYTES:
            raise StateFileError(
                f"{name!r} holds {status.st_size} bytes; a run state file holds at most "
                f"{MAX_STATE_FILE_BYTES}."
            )
        content = handle.read(MAX_STATE_FILE_BYTES + 1)
    first, _, rest = content.partition(b"\n")
    if not first.startswith(STATE_MAGIC + b" "):
        raise StateFileError(f"{name!r} is not a botorch-nn-uq run state file.")
    version = first[len(STATE_MAGIC) + 1 :].decode(errors="replace")
    if version not in {str(readable) for readable in READABLE_FORMATS}:
        raise StateFileError(
            f"{name!r} is a run state of format {version!r}; this version of "
            f"botorch-nn-uq reads formats {', '.join(map(str, READABLE_FORMATS))} only."
        )
    digest, _, payload = rest.partition(b"\n")
    if state_digest(payload).encode() != digest:
        raise StateFileError(f"{name!r} is corrupted: its content does not match its checksum.")
    return payload, digest.decode(), int(version)


def _current_digest(handle: int) -> str | None:
    r"""The checksum line of the open file, or ``None`` if it is not a state file of a
    readable format (read from the file's head only: the payload is not checked here; an
    older format counts, so that a run loaded from one can replace it)."""
    head = os.pread(handle, len(STATE_MAGIC) + 96, 0)
    first, _, rest = head.partition(b"\n")
    if first not in {STATE_MAGIC + b" " + str(version).encode() for version in READABLE_FORMATS}:
        return None
    digest = rest.partition(b"\n")[0]
    return digest.decode() if len(digest) == 64 else None


@contextlib.contextmanager
def locked_state_file(path: str | Path) -> Iterator[None]:
    r"""Hold the advisory lock of the state file at ``path`` while the block runs.

    A command that reads, changes and writes a run's state runs inside this block, so
    that another command on the same file is refused while it works. Where ``path`` does
    not exist yet there is nothing to lock: a new state file is created only if none
    appeared meanwhile (:func:`write_state_file`). Re-entrant within a process.

    Args:
        path: The state file.

    Raises:
        StateFileBusyError: If another command holds the lock.

    Example:
        >>> with locked_state_file("run.state"):
        ...     optimizer = BayesianOptimizer.load("run.state")
        ...     optimizer.tell(X, Y)
        ...     optimizer.save("run.state")
    """
    with _lock(Path(path)):
        yield


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[int | None]:
    r"""Lock the file at ``path`` (the descriptor of the locked file, or ``None`` when
    there is no file), retrying when the path was replaced between opening and locking."""
    while True:
        try:
            descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            yield None
            return
        try:
            status = os.fstat(descriptor)
            key = (status.st_dev, status.st_ino)
            if not stat.S_ISREG(status.st_mode):
                raise StateFileError(f"{str(path)!r} is not a regular file.")
            if fcntl is not None and key not in _HELD_LOCKS:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as error:
                    if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    raise StateFileBusyError(
                        f"{str(path)!r} is in use by another command (it holds the file's "
                        "lock); wait for that command to finish, then run this one again."
                    ) from None
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != key:
                # Replaced by a writer between our open and our lock: lock the new file.
                continue
            _HELD_LOCKS[key] = _HELD_LOCKS.get(key, 0) + 1
            try:
                yield descriptor
            finally:
                _HELD_LOCKS[key] -= 1
                if not _HELD_LOCKS[key]:
                    del _HELD_LOCKS[key]
            return
        finally:
            os.close(descriptor)


def write_state_file(
    path: str | Path, payload: bytes, *, replaces: str | None, overwrite: bool = False
) -> str:
    r"""Write a state file atomically, comparing before writing.

    Args:
        path: The state file.
        payload: What the file holds after its two header lines.
        replaces: The checksum of the state the writer read from ``path`` (the file must
            still hold it), or ``None`` for a writer that did not read ``path`` (the file
            must not exist, unless ``overwrite``).
        overwrite: Replace whatever ``path`` holds (a regular file).

    Returns:
        The checksum of the written payload.

    Raises:
        StaleStateFileError: If the file changed since the writer read it, was removed,
            or exists though the writer did not read it (without ``overwrite``).
        StateFileBusyError: If another command holds the file's lock.
        OSError: If the file cannot be written (the old file is then intact).
    """
    path = Path(path)
    name = str(path)
    digest = state_digest(payload)
    content = STATE_MAGIC + b" " + str(STATE_FORMAT).encode() + b"\n"
    content += digest.encode() + b"\n" + payload
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path) as descriptor:
        if descriptor is None:
            if replaces is not None:
                raise StaleStateFileError(
                    f"{name!r} was removed since this run read it; not written (save to "
                    "another path)."
                )
        elif not overwrite:
            current = _current_digest(descriptor)
            if replaces is None:
                raise StaleStateFileError(
                    f"{name!r} exists and holds "
                    + ("another run" if current is not None else "something else")
                    + "; not replaced (pass overwrite=True to replace it)."
                )
            if current != replaces:
                raise StaleStateFileError(
                    f"{name!r} changed since this run read it (another command wrote it); "
                    "not written, so that its work is kept: load the file again."
                )
        _remove_partial_files(path)
        temporary = _write_temporary(path, content)
        try:
            if descriptor is None:
                # Create without replacing: a file that appeared meanwhile is kept.
                try:
                    os.link(temporary, path)
                except FileExistsError:
                    raise StaleStateFileError(
                        f"{name!r} was created by another command meanwhile; not replaced."
                    ) from None
                except OSError as error:
                    # A file system without hard links: a rename, checked just before.
                    if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EMLINK):
                        raise
                    if path.exists():
                        raise StaleStateFileError(
                            f"{name!r} was created by another command meanwhile; not replaced."
                        ) from None
                    os.replace(temporary, path)
                else:
                    os.unlink(temporary)
            else:
                os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    _sync_folder(path.parent)
    return digest


def _write_temporary(path: Path, content: bytes) -> str:
    r"""A hidden file next to ``path`` holding ``content``, flushed to disk."""
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def _remove_partial_files(path: Path) -> None:
    r"""Remove the temporary files of writes to ``path`` that never finished (a writer
    killed mid-write); called under the file's lock, which every writer of an existing
    file holds (two commands creating one new file at once are not serialised: one of
    them then fails to create it, and nothing is lost)."""
    for partial in path.parent.glob(f".{glob.escape(path.name)}.*{PARTIAL_SUFFIX}"):
        with contextlib.suppress(OSError):
            partial.unlink()


def _sync_folder(folder: Path) -> None:
    r"""Flush the folder's entry of a renamed file to disk, where the platform can."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
