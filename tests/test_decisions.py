"""Decisions are data: no task decides on another task's sentence.

A module reports what it found as booleans and lists of names (sglang_host_state's `missing_users`,
`disabled_units`, ...); a task's `when`, `changed_when`, `failed_when` or `until` that looks for words inside a
message, a command's output or a plan's sentences breaks the day the wording changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDITIONS = ("when", "changed_when", "failed_when", "until")
# Words looked for in text: "'Created symlink' in x.stderr", "x.msg is search(...)", "... | regex_search(...)",
# or anything that reads the plan's sentences ("other", "reasons").
SENTENCE = re.compile(
    r"""(['"][^'"]*\s[^'"]*['"]\s+(not\s+)?in\s+\S+\.(stdout|stderr|msg|stdout_lines|stderr_lines|other|reasons))"""
    r"""|(\.(stdout|stderr|msg|other|reasons)\b[^|]*\bis\s+(not\s+)?(search|match|regex))"""
    r"""|(\|\s*regex_(search|findall))"""
    r"""|(\.plan\.other\b)"""
)


def _tasks(node: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(node, list):
        for item in node:
            found += _tasks(item)
    elif isinstance(node, dict):
        found.append(node)
        for key in ("block", "rescue", "always", "tasks", "handlers", "pre_tasks", "post_tasks"):
            found += _tasks(node.get(key))
    return found


def sentence_conditions(tasks: Any) -> list[str]:
    """The conditions of these tasks that look for words in text."""
    hits = []
    for task in _tasks(tasks):
        for key in CONDITIONS:
            for condition in task.get(key) if isinstance(task.get(key), list) else [task.get(key)]:
                if isinstance(condition, str) and SENTENCE.search(condition):
                    hits.append(f"{task.get('name', '?')}: {key}: {condition}")
    return hits


FILES = sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml")])
FILES += sorted(ROOT.glob("playbooks/*.yml"))


@pytest.mark.parametrize("path", FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_condition_reads_a_sentence(path: Path) -> None:
    hits = sentence_conditions(yaml.safe_load(path.read_text()))
    assert not hits, f"{path.relative_to(ROOT)}: " + " | ".join(hits)


def test_the_rule_finds_what_it_is_for() -> None:
    planted = [
        {"name": "a", "changed_when": "'Created symlink' in r.stderr"},
        {"name": "b", "block": [{"name": "c", "when": ["x", "'create user sglang' in plan.other"]}]},
        {"name": "d", "failed_when": "r.msg is search('no such unit')"},
        {"name": "e", "when": "r.stdout | regex_search('enabled')"},
        {"name": "f", "when": "__state.plan.other | length > 0"},
    ]
    assert [hit.split(":")[0] for hit in sentence_conditions(planted)] == ["a", "c", "d", "e", "f"]
    data = [{"name": "g", "when": "'sglang' in plan.missing_users"}, {"name": "h", "changed_when": "r.changed"}]
    assert sentence_conditions(data) == []
