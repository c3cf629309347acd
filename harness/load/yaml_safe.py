"""Bounded reading of a YAML file: size, encoding, nesting and alias expansion checked first.

PyYAML's safe loading is not bounded (an alias bomb, a list nested hundreds deep): this module
raises :class:`YamlFileError` (one line: what was wrong and where) before anything walks the data,
within :data:`MAX_BYTES`, :data:`MAX_DEPTH` and :data:`MAX_ALIAS_NODES` (docs/specs.md, "Reading a
spec file within bounds").
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

__all__ = ["YamlFileError", "MAX_BYTES", "MAX_DEPTH", "MAX_ALIAS_NODES", "read_text", "load_text", "load_file"]

_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (about ten times faster), else PyYAML's."""

MAX_BYTES = 1_000_000
"""Largest file read (bytes; the largest shipped spec is about 20 KB)."""

MAX_DEPTH = 40
"""Deepest nesting of sequences and mappings (the shipped specs nest at most 7 levels)."""

MAX_ALIAS_NODES = 20_000
"""How many nodes alias expansion may add beyond the nodes written out in the file."""


class YamlFileError(ValueError):
    """A file that cannot be read as bounded YAML. ``line`` is 1-based (0: the whole file);
    ``message`` says what was expected, without the file name (``str()`` has it)."""

    def __init__(self, path: str | Path, line: int, message: str):
        self.path, self.line, self.message = str(path), line, message
        super().__init__(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")


def read_text(path: str | Path, *, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes.

    Raises:
        YamlFileError: missing, unreadable, a folder or other non-regular file, larger
            than ``max_bytes``, or not UTF-8 (naming the first bad byte and its offset).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except OSError as exc:
        raise YamlFileError(path, 0, f"cannot read file: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise YamlFileError(path, 0, "is a folder; expected a YAML file")
        if not stat.S_ISREG(info.st_mode):
            raise YamlFileError(path, 0, "is not a regular file; expected a YAML file")
        if info.st_size > max_bytes:
            raise YamlFileError(path, 0, f"file is {info.st_size:,} bytes; a spec may be at most {max_bytes:,} bytes")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise YamlFileError(path, 0, f"cannot read file: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew while being read
        raise YamlFileError(path, 0, f"file is over {max_bytes:,} bytes; a spec may be at most {max_bytes:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlFileError(
            path, line, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def _line(mark: Any) -> int:
    return mark.line + 1 if mark is not None else 0


def check_bounds(
    text: str, path: str | Path = "<text>", *, max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES
) -> None:
    """Refuse, before composing, what would make walking the loaded data unbounded: one iterative
    pass over ``yaml.parse`` events, an alias adding its anchor's expanded count to its parent.

    Raises:
        YamlFileError: nesting deeper than ``max_depth``, a recursive alias, aliases
            expanding to more than ``max_alias_nodes`` nodes beyond the written ones, a
            sequence or mapping used as a mapping key, or invalid YAML.
    """
    sizes: dict[str, int] = {}
    collections: set[str] = set()  # anchors of sequences and mappings
    frames: list[list[Any]] = []  # [anchor, expanded count, is mapping, children so far]
    written = expanded = 0
    try:
        for event in yaml.parse(text, Loader=_SafeLoader):
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                if frames and frames[-1][2] and frames[-1][3] % 2 == 0 and not isinstance(event, yaml.ScalarEvent):
                    if not isinstance(event, yaml.AliasEvent) or event.anchor in collections:
                        raise YamlFileError(
                            path,
                            _line(event.start_mark),
                            "a mapping key must be a plain value, not a sequence or mapping",
                        )
                if frames:
                    frames[-1][3] += 1
            if isinstance(event, yaml.ScalarEvent):
                written += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
                    collections.discard(event.anchor)
                if frames:
                    frames[-1][1] += 1
                else:
                    expanded += 1
            elif isinstance(event, yaml.AliasEvent):
                if any(f[0] == event.anchor for f in frames):
                    raise YamlFileError(
                        path,
                        _line(event.start_mark),
                        f"recursive alias *{event.anchor} (it refers to a node that contains it)",
                    )
                size = sizes.get(event.anchor)
                if size is None:
                    raise YamlFileError(
                        path, _line(event.start_mark), f"alias *{event.anchor} names no anchor before it"
                    )
                if frames:
                    frames[-1][1] += size
                else:
                    expanded += size
            elif isinstance(event, yaml.CollectionStartEvent):
                written += 1
                frames.append([event.anchor, 1, isinstance(event, yaml.MappingStartEvent), 0])
                if len(frames) > max_depth:
                    raise YamlFileError(
                        path,
                        _line(event.start_mark),
                        f"nested deeper than {max_depth} levels of sequences and mappings",
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, size, _, _ = frames.pop()
                if anchor is not None:
                    sizes[anchor] = size
                    collections.add(anchor)
                if frames:
                    frames[-1][1] += size
                else:
                    expanded += size
            else:
                continue
            current = expanded + sum(f[1] for f in frames)
            if current - written > max_alias_nodes:
                raise YamlFileError(
                    path,
                    _line(event.start_mark),
                    f"aliases expand to over {max_alias_nodes:,} nodes more than the file writes out "
                    "(an alias bomb?); write the values out or use fewer aliases",
                )
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None


def _check_tree(root: yaml.Node, path: str | Path, *, max_depth: int = MAX_DEPTH) -> None:
    """Nesting depth and plain mapping keys, on the composed tree (iterative); libyaml's composer
    bounds nesting only at 1000 levels.

    Raises:
        YamlFileError: nesting deeper than ``max_depth``, or a sequence or mapping as a mapping key.
    """
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            continue
        if depth + 1 > max_depth:
            raise YamlFileError(
                path, _line(node.start_mark), f"nested deeper than {max_depth} levels of sequences and mappings"
            )
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    raise YamlFileError(
                        path, _line(key.start_mark), "a mapping key must be a plain value, not a sequence or mapping"
                    )
                stack.append((value, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in node.value)


def _yaml_error(path: str | Path, exc: yaml.YAMLError, text: str = "") -> YamlFileError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if context and str(problem).startswith(
        "but "
    ):  # "expected a single document in the stream" + "but found another document"
        problem = f"{context} {problem}"
    if isinstance(exc, yaml.reader.ReaderError):  # a control character; the position is a character offset
        char = exc.character if isinstance(exc.character, int) else ord(exc.character[:1] or "\0")
        problem = f"character U+{char:04X} at character offset {exc.position} is not allowed in YAML text"
    problem = " ".join(str(problem).split())
    if problem.startswith("found undefined alias") and mark is not None:  # said as check_bounds says it
        name = re.match(r"\*([^\s,\[\]{}]*)", text[mark.index :])
        return YamlFileError(path, _line(mark), f"alias *{name.group(1) if name else '?'} names no anchor before it")
    if "maximum nesting depth" in problem:  # libyaml's own limit (1000 levels) struck before ours
        return YamlFileError(path, _line(mark), f"nested deeper than {MAX_DEPTH} levels of sequences and mappings")
    return YamlFileError(path, _line(mark), f"not valid YAML: {problem}")


def load_text(text: str, path: str | Path = "<text>") -> tuple[yaml.Node | None, Any]:
    """(composed node with line marks, constructed data) of one YAML document, bounded.

    Raises:
        YamlFileError: see :func:`check_bounds`; invalid YAML (line and PyYAML's problem).
    """
    if "&" in text:  # without an anchor there is no alias to expand: the event pass is skipped
        check_bounds(text, path)
    loader = _SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_tree(node, path)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc, text) from None
    except RecursionError:  # bounded by MAX_DEPTH above; kept so no traceback escapes
        raise YamlFileError(path, 0, f"nested deeper than {MAX_DEPTH} levels of sequences and mappings") from None
    finally:
        loader.dispose()
    return node, data


def load_file(path: str | Path) -> tuple[yaml.Node | None, Any]:
    """:func:`read_text` then :func:`load_text`."""
    return load_text(read_text(path), path)
