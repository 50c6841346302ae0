"""Each fact once: a role's default is written in that role's defaults alone.

Another role, a playbook, an inventory (the lab's settings included) or the README's examples that write the same
value again, as an assignment or as `NAME | default(VALUE)`, would drift from it the day the default changes; they
leave it out, or read it. (The role reference is generated from argument_specs by antsibull-docs, scripts/docsite.py.)
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


class _Loader(yaml.SafeLoader):
    """YAML as the inventories hold it: a vaulted value is a value no default equals."""


_Loader.add_constructor("!vault", lambda loader, node: ("vaulted", loader.construct_scalar(node)))


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader with one more tag


def role_defaults(root: Path = ROOT) -> dict[str, tuple[str, Any]]:
    """Every role default: name -> (its role, its value)."""
    found: dict[str, tuple[str, Any]] = {}
    for path in sorted(root.glob("roles/*/defaults/main.yml")):
        for name, value in (_load(path.read_text()) or {}).items():
            found[name] = (path.parent.parent.name, value)
    return found


DEFAULTS = role_defaults()
DEFAULT_CALL = re.compile(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(([^()]*)\)")


def _same(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def restated(text: str, owner: str | None, assignments: bool, defaults: dict[str, tuple[str, Any]]) -> list[str]:
    """The role defaults this text writes again: top-level assignments (YAML files of variables) and default()s."""
    found = []
    data = _load(text) if assignments else None
    for name, value in (data if isinstance(data, dict) else {}).items():
        if name in defaults and defaults[name][0] != owner and _same(value, defaults[name][1]):
            found.append(f"{name}: {value!r} (the default of {defaults[name][0]})")
    for name, literal in DEFAULT_CALL.findall(text):
        if name not in defaults:
            continue
        word = literal.strip()
        try:
            value = None if word in ("none", "None", "") else ast.literal_eval(word)
        except (ValueError, SyntaxError):
            continue
        if _same(value, defaults[name][1]):
            found.append(f"{name} | default({literal}) (the default of {defaults[name][0]})")
    return found


def _sources() -> list[Path]:
    patterns = ("roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/tasks/*.yml", "roles/*/handlers/*.yml")
    patterns += ("roles/*/templates/*.j2", "playbooks/*.yml", "inventories/**/*.yml", "molecule/*/host_vars/*.yml")
    files = [path for pattern in patterns for path in ROOT.glob(pattern)] + [
        ROOT / "roles/lab_hosts/files/lab-settings.yml"
    ]
    return sorted({path for path in files if path.is_file() and not path.is_symlink()})


def _owner(path: Path) -> str | None:
    parts = path.relative_to(ROOT).parts
    return (
        parts[1] if parts[0] == "roles" and parts[2] in ("defaults", "vars", "tasks", "handlers", "templates") else None
    )


LAB_SETTINGS = _load((ROOT / "roles/lab_hosts/files/lab-settings.yml").read_text())


def _defaults_under(path: Path) -> dict[str, tuple[str, Any]]:
    """The defaults a file could write again. A lab host's host_vars (molecule/*/host_vars) sit over the lab's settings:
    where those set a variable to another value, the role's default written there puts it back for that host (a
    scenario that runs as production does), which restates nothing."""
    if path.parent.name != "host_vars" or path.relative_to(ROOT).parts[0] != "molecule":
        return DEFAULTS
    return {
        name: default
        for name, default in DEFAULTS.items()
        if name not in LAB_SETTINGS or _same(LAB_SETTINGS[name], default[1])
    }


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_role_default_is_written_again(path: Path) -> None:
    variables = path.suffix == ".yml" and path.parent.name not in ("tasks", "handlers", "playbooks")
    found = restated(path.read_text(), _owner(path), variables, _defaults_under(path))
    assert not found, f"{path.relative_to(ROOT)} restates: " + "; ".join(found)


def _rst_yaml_blocks(text: str) -> list[str]:
    blocks = re.findall(r"^\.\. code(?:-block)?:: ya?ml\n\n((?:(?:   .*)?\n)+)", text, re.M)
    return [textwrap.dedent(block) for block in blocks]


def _yaml_examples() -> dict[str, list[str]]:
    """The YAML examples of the README (fenced) and of the guides (RST code blocks), by file."""
    examples = {"README.md": re.findall(r"```ya?ml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)}
    for guide in sorted((ROOT / "docs/docsite/rst").glob("*.rst")):
        examples[str(guide.relative_to(ROOT))] = _rst_yaml_blocks(guide.read_text())
    return examples


def test_the_example_reader_finds_a_guides_yaml_blocks() -> None:
    text = "Set it:\n\n.. code:: yaml\n\n   sglang_genconfig_temperature: 0.6\n\n   a: 1\n\nThen run.\n"
    assert _rst_yaml_blocks(text) == ["sglang_genconfig_temperature: 0.6\n\na: 1\n\n"]
    assert restated(_rst_yaml_blocks(text)[0], None, True, DEFAULTS)


def test_the_docs_examples_restate_no_default() -> None:
    found = []
    for path, blocks in _yaml_examples().items():
        for block in blocks:
            try:
                found += [f"{path}: {item}" for item in restated(block, None, True, DEFAULTS)]
            except yaml.YAMLError:
                found += [f"{path}: {item}" for item in restated(block, None, False, DEFAULTS)]
    assert not found, "YAML examples of the docs restate role defaults: " + "; ".join(found)


def test_the_rule_finds_what_it_is_for(tmp_path: Path) -> None:
    """Planted restatements (the production inventory's old topology, sglang_verify's old temperature) are found;
    other values, the owning role's own defaults and unrelated names are not."""
    role = tmp_path / "roles/r/defaults"
    role.mkdir(parents=True)
    (role / "main.yml").write_text("r_port: 8000\nr_topology: {a: [0, 1]}\nr_name: x\n")
    defaults = role_defaults(tmp_path)
    inventory = "r_port: 8000\nr_topology: {a: [0, 1]}\nr_name: y\nother_port: 8000\n"
    assert restated(inventory, None, True, defaults) == [
        "r_port: 8000 (the default of r)",
        "r_topology: {'a': [0, 1]} (the default of r)",
    ]
    assert restated(inventory, "r", True, defaults) == []
    assert restated("t: \"{{ r_name | default('x') }} {{ r_port | default(9) }}\"", None, False, defaults) == [
        "r_name | default('x') (the default of r)"
    ]
    assert restated("r_port: '8000'\n", None, True, defaults) == []


NEWCOMER = {
    "Where is the temperature default set?": (
        "roles/sglang_genconfig/defaults/main.yml",
        "sglang_genconfig_temperature:",
    ),
    "Where is the model path set?": ("roles/sglang_common/defaults/main.yml", "sglang_common_model_path:"),
    "Where is the router's port set?": ("roles/sglang_services/defaults/main.yml", "  router:\n    mode: router"),
    "What restarts prefill and decode?": (
        "plugins/modules/sglang_host_restart.py",
        "The one path by which the SGLang services restart",
    ),
    "How do I add a server flag the collection manages?": ("plugins/module_utils/sglang_flags.py", "SERVER_FLAGS"),
    "What happens when the verification (or any step of a host's apply) fails?": (
        "roles/sglang_rollout/tasks/rollback.yml",
        "What happens when a host's apply fails",
    ),
    "What does a host have to hold (every file, unit and release)?": (
        "plugins/plugin_utils/sglang_desired.py",
        "def desired_state(",
    ),
}


@pytest.mark.parametrize("question", NEWCOMER)
def test_the_readme_answers_each_newcomer_question_with_the_one_file_that_holds_it(question: str) -> None:
    path, holds = NEWCOMER[question]
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| {question} |"))
    assert f"`{path}`" in row
    assert holds in (ROOT / path).read_text()
    if path.startswith("roles/") and path.endswith("defaults/main.yml"):
        name = holds.split(":")[0].strip()
        others = [p for p in ROOT.glob("roles/*/defaults/main.yml") if p != ROOT / path]
        assert not any(re.search(rf"^{re.escape(name)}:", p.read_text(), re.M) for p in others), name


# Twins removed by issue 27: each of these facts is written in one place, and these tests fail at a second copy.
HELPER_MODULES = ("sglang_files.py", "sglang_sampling_defaults.py", "sglang_records.py", "sglang_metrics.py")


def _texts(*patterns: str) -> dict[Path, str]:
    return {path: path.read_text() for pattern in patterns for path in sorted(ROOT.glob(pattern)) if path.is_file()}


def test_the_helper_modules_are_listed_once() -> None:
    """plugin_utils/sglang_programs.py lists the helper set; no layout, role, playbook, README or guide lists it
    again."""
    owner = ROOT / "plugins/plugin_utils/sglang_programs.py"
    assert all(name in owner.read_text() for name in HELPER_MODULES)
    sources = ("roles/*/vars/*.yml", "roles/*/defaults/*.yml", "playbooks/*.yml", "README.md", "docs/docsite/rst/*.rst")
    for path, text in _texts(*sources).items():
        lines = [line for line in text.splitlines() if sum(name in line for name in HELPER_MODULES) > 1]
        assert not lines, f"{path.relative_to(ROOT)} lists the helper set again: {lines[0][:120]}"


def test_a_flags_choices_are_written_in_the_flag_table_alone() -> None:
    """The kv-cache dtypes and the transfer backends: in the flag table (argument_specs are held to it)."""
    kinds = {"'fp8_e4m3', 'bfloat16'": "kv-cache dtypes", '"mooncake", "nixl"': "transfer backends"}
    texts = _texts("plugins/**/*.py", "roles/*/tasks/*.yml", "roles/*/vars/*.yml", "playbooks/*.yml")
    for spelling, kind in kinds.items():
        holders = [
            str(p.relative_to(ROOT)) for p, t in texts.items() if spelling in t or spelling.replace("'", '"') in t
        ]
        assert holders == ["plugins/module_utils/sglang_flags.py"], (kind, holders)


def test_a_role_computes_its_part_of_the_desired_state_in_one_task_file() -> None:
    """The three roles that write share sglang_common's tasks/desired.yml for a run with no plan before."""
    callers = [
        str(p.relative_to(ROOT)) for p, t in _texts("roles/*/tasks/*.yml").items() if "sglang_desired_state:" in t
    ]
    assert callers == ["roles/sglang_common/tasks/desired.yml"]
    for role in ("sglang_runtime", "sglang_genconfig", "sglang_services"):
        assert "tasks_from: desired" in (ROOT / f"roles/{role}/tasks/main.yml").read_text(), role


def test_what_a_server_runs_with_is_asked_in_one_place() -> None:
    """/server_info and the startup line of the current invocation: module_utils/sglang_probe.py, for the light
    proof (sglang_host_state) and the verification (sglang_ask) alike. (The host's own timer reads the startup line
    in the helper set, module_utils/sglang_metrics.py, which runs on the host without Ansible.)"""
    texts = _texts("plugins/modules/*.py", "plugins/module_utils/*.py")
    asking = sorted(
        str(p.relative_to(ROOT))
        for p, t in texts.items()
        if '+ "/server_info"' in t or 'f"_SYSTEMD_INVOCATION_ID=' in t
    )
    assert asking == ["plugins/module_utils/sglang_metrics.py", "plugins/module_utils/sglang_probe.py"]


def test_the_fence_is_inside_the_writers_not_a_task_between_them() -> None:
    """deploy.yml imports no renew step: every module that writes checks the lock itself (fence)."""
    assert "tasks_from: renew" not in (ROOT / "playbooks/deploy.yml").read_text()
    for module in (
        "sglang_managed_files",
        "sglang_generation_config",
        "sglang_release",
        "sglang_snapshot",
    ):
        assert "sglang_lock.fenced(module)" in (ROOT / f"plugins/modules/{module}.py").read_text(), module
    # The drain, the restart and the undrain: in module_utils, shared by their modules and sglang_host_restart.
    for util in ("sglang_drain", "sglang_restart"):
        assert "sglang_lock.fenced(module)" in (ROOT / f"plugins/module_utils/{util}.py").read_text(), util
