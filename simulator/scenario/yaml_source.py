"""Reading a scenario YAML document together with the line of every key.

PyYAML's composer keeps a mark (line, column) on every node; walking the node
tree before constructing Python objects gives a map from YAML path to line, so
that error messages can say ``file.yaml:12: stream.phases.1.rate: ...``.
Duplicate keys in one mapping are errors (PyYAML would silently keep the last).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from simulator.errors import ConfigError
from simulator.scenario.schema import Path

_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML document and the 1-based line of every key and list item."""

    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """Line of ``path`` or of its nearest ancestor that has one."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


#: Most nodes a scenario document may have once aliases are expanded (a scenario has a few
#: hundred; an alias "bomb" would otherwise make validation exponential).
MAX_NODES = 100_000


@dataclass
class _Walk:
    """State of one walk over the node tree: the line map, a node budget, the open nodes."""

    loader: yaml.SafeLoader
    source: str
    lines: dict[Path, int] = field(default_factory=dict)
    nodes: int = 0
    open: set[int] = field(default_factory=set)

    def visit(self, node: yaml.Node, path: Path) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ConfigError(
                f"the document expands to more than {MAX_NODES:,} nodes (aliases?); "
                "a scenario is a few hundred",
                self.source,
            )
        if id(node) in self.open:
            line = node.start_mark.line + 1
            raise ConfigError("an alias refers to a node that contains it", f"{self.source}:{line}")
        self.open.add(id(node))
        try:
            self._children(node, path)
        finally:
            self.open.discard(id(node))

    def _children(self, node: yaml.Node, path: Path) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.loader.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ConfigError(
                        f"duplicate key '{key}' (first on line {seen[key]})",
                        f"{self.source}:{line}",
                    )
                seen[key] = line
                self.lines[(*path, key)] = line
                self.visit(value_node, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.lines[(*path, index)] = item.start_mark.line + 1
                self.visit(item, (*path, index))


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse one YAML document, recording key lines.

    Raises
    ------
    ConfigError
        On a syntax error (with line and column), on several documents in one
        file, a duplicate key, a recursive alias or a document that expands past
        :data:`MAX_NODES` nodes.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(None)
        walk = _Walk(loader, source)
        walk.visit(node, ())
        lines = walk.lines
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"YAML syntax error: {problem}", where) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML error: {exc}", source) from exc
    finally:
        loader.dispose()
    return YamlDocument(data, lines)
