"""Reading YAML that a person wrote: libyaml's safe loader, with aliases on a budget.

``yaml.safe_load`` has two problems with hostile or careless files. It is pure Python (a 5 MB
malformed file took 81 s to be refused), and aliases share nodes, so a 600-byte "billion
laughs" loads at once and then expands to 10^9 values in whatever walks it next. Here libyaml
(C; nesting capped at 1,000 levels) first checks the syntax without building anything (a
malformed 5 MB file is refused in well under a second), then composes the node graph, which is
walked once to count what the aliases add, and only then built into Python. Building refuses
what YAML would silently resolve: a key given twice in one mapping (the last would win) and an
integer too long to be meant (core/input_limits.py ``MAX_INT_DIGITS``).
"""

from __future__ import annotations

from typing import Any

import yaml

from planloop.core.input_limits import MAX_INT_DIGITS
from planloop.core.json_input import shown_key

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CParser: Any = getattr(getattr(yaml, "_yaml", None), "CParser", None)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlLimitError(ValueError):
    """A YAML document refused before it is built; ``line`` is 1-based (0 = unknown)."""

    def __init__(self, message: str, *, line: int = 0) -> None:
        self.line = line
        super().__init__(message)


class _StrictLoader(_BaseLoader):  # type: ignore[misc]
    """The safe loader, refusing duplicate keys and overlong integers (naming the line)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        digits = sum(char.isalnum() for char in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise YamlLimitError(
                f"an integer of more than {MAX_INT_DIGITS} digits",
                line=node.start_mark.line + 1,
            )
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def _refuse_duplicate_keys(loader: Any, node: yaml.MappingNode) -> None:
    """A key written twice in one mapping; keys a merge (``<<``) brings may be overridden."""
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        try:
            seen_at = first.get(key)
        except TypeError:  # an unhashable key: construct_mapping refuses it
            continue
        if seen_at is not None:
            raise YamlLimitError(
                f"duplicate key {shown_key(key)} (first at line {seen_at})", line=line
            )
        first[key] = line


def load_yaml(text: str, *, max_alias_nodes: int | None) -> Any:
    """The Python data of one YAML document (None when empty).

    Args:
        text: The document.
        max_alias_nodes: Nodes aliases may add by expansion; None = no limit.

    Raises:
        yaml.YAMLError: the text is not YAML.
        YamlLimitError: a recursive alias, or aliases that expand past the budget.
    """
    if _CParser is not None:
        _CParser(text).raw_parse()  # syntax only, in C: no Python object per event
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "&" in text:  # no anchor, no alias: the walk below has nothing to find
            _check_aliases(node, max_alias_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_aliases(root: yaml.Node, budget: int | None) -> None:
    """Refuse a node graph with a cycle, or whose expansion adds more than ``budget`` nodes.

    One iterative post-order walk: a node's expanded size is 1 + its children's; nodes shared
    through aliases are sized once and counted at each use.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    while todo:
        node, children_done = todo.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YamlLimitError(
                "a YAML alias refers to a node that contains it (recursive alias)",
                line=node.start_mark.line + 1,
            )
        open_nodes.add(key)
        todo.append((node, True))
        todo.extend((child, False) for child in _children(node) if id(child) not in sizes)
    added = sizes[id(root)] - len(sizes)
    if budget is not None and added > budget:
        raise YamlLimitError(
            f"YAML aliases expand the document by {added} nodes, above the limit of "
            f"{budget} (max_yaml_alias_nodes)"
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
