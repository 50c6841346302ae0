"""Repository-wide promises: the lab is the default, inventories hold no addresses, roles document
every variable, the stand-in never reaches production, and the collection builds and installs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks/main.yml").exists())
ADDRESS = re.compile(r"\b(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")
DOCUMENTATION = ("192.0.2.", "198.51.100.", "203.0.113.")


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}
    cwd = kwargs.pop("cwd", ROOT)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, check=False, **kwargs)


def test_default_inventory_is_the_lab():
    out = run("ansible-config", "dump", "--only-changed", "--format", "json")
    settings = {item["name"]: item["value"] for item in json.loads(out.stdout) if "name" in item}
    assert [Path(p).resolve() for p in settings["DEFAULT_HOST_LIST"]] == [ROOT / "inventories/lab"]


def test_bare_deploy_targets_only_loopback_lab_hosts():
    inventory = json.loads(run("ansible-inventory", "--list").stdout)
    hosts = inventory["_meta"]["hostvars"]
    assert "dsv4-gpu-01" not in hosts
    assert all(v.get("ansible_host") == "127.0.0.1" for v in hosts.values()), hosts
    listed = run("ansible-playbook", "deploy.yml", "--list-hosts")
    assert listed.returncode == 0, listed.stderr
    assert "dsv4-gpu-01" not in listed.stdout


@pytest.mark.parametrize(
    "path",
    sorted(p for d in ("inventories", "molecule", "tests") for p in (ROOT / d).rglob("*.yml")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_inventory_or_test_file_names_a_non_loopback_address(path):
    """Loopback, the router's bind-all, or in an inventory that only renders and never connects (*render-hosts.yml,
    tests/contract) the documentation ranges of RFC 5737, which no network routes: never a real or private address."""
    render_only = path.name.endswith("render-hosts.yml")
    for match in ADDRESS.finditer(path.read_text()):
        address = match.group(0)
        assert (
            match.group(1) == "127"
            or address == "0.0.0.0"  # noqa: S104 - the router's bind-all
            or (render_only and address.startswith(DOCUMENTATION))
        ), f"{path}: {address}"


def test_production_keeps_host_key_checking():
    group_vars = (ROOT / "inventories/production/group_vars/sglang_dsv4.yml").read_text()
    assert "StrictHostKeyChecking" not in group_vars and "host_key_checking" not in group_vars
    assert "host_key_checking" not in (ROOT / "ansible.cfg").read_text()


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"sglang_runtime_kind": "lab_standin"}, "sglang_runtime_kind=lab_standin"),
        # The label says sglang, what would run is the stand-in: the gate judges what runs.
        (
            {"sglang_runtime_server_entry": ["/opt/sglang-lab/sglang_lab_standin.py", "server"]},
            'sglang_runtime_server_entry=["/opt/sglang-lab/sglang_lab_standin.py", "server"] is not the release\'s own',
        ),
        # A release without its compiled files: every start would compile in memory what it imports.
        ({"sglang_runtime_release_no_compile": ["router"]}, 'sglang_runtime_release_no_compile=["router"]'),
    ],
    ids=["kind", "entry", "no_compile"],
)
def test_lab_standin_is_refused_against_production_before_any_connection(settings, named):
    out = run("ansible-playbook", "-i", "inventories/production", "deploy.yml", "-e", json.dumps(settings))
    assert out.returncode != 0
    assert named in out.stdout and ": a lab tool, refused here" in out.stdout, out.stdout[-3000:]
    assert "sglang_runtime_environment is 'production'" in out.stdout
    assert "UNREACHABLE" not in out.stdout


# The entry point whose argument spec declares a role's variables: `main`, but for sglang_common, every role's
# dependency, whose checks are their own entry point (a `main` one would run at every import of every role).
VARIABLES_ENTRY = {"sglang_common": "preflight"}


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = yaml.safe_load((ROOT / f"roles/{role}/defaults/main.yml").read_text()) or {}
    specs = yaml.safe_load((ROOT / f"roles/{role}/meta/argument_specs.yml").read_text())
    options = specs["argument_specs"][VARIABLES_ENTRY.get(role, "main")]["options"]
    assert set(defaults) <= set(options), f"undocumented: {set(defaults) - set(options)}"
    assert all(name.startswith(role + "_") for name in options), options
    for name, option in options.items():
        assert option.get("description"), name
        if "default" in option and name in defaults:
            assert option["default"] == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_role_variables_are_prefixed(role):
    for folder in ("vars", "defaults"):
        data = yaml.safe_load((ROOT / f"roles/{role}/{folder}/main.yml").read_text()) or {}
        prefix = ("_" if folder == "vars" else "") + role + "_"
        assert all(key.startswith(prefix) for key in data), (folder, list(data))


@pytest.mark.parametrize("role", ROLES)
def test_ansible_doc_renders_each_role(role):
    out = run("ansible-doc", "-t", "role", "-r", "roles", role)
    assert out.returncode == 0, out.stderr
    assert re.search(r"ENTRY POINT: \W*main", out.stdout)


def test_unit_template_carries_the_managed_header():
    for template in (ROOT / "host/templates").glob("*.j2"):
        assert template.read_text().startswith("{{ ansible_managed | comment }}"), template


def test_collection_builds_installs_and_its_roles_run_by_fqcn(tmp_path):
    built = run("ansible-galaxy", "collection", "build", "--output-path", str(tmp_path))
    assert built.returncode == 0, built.stderr
    tarball = next(tmp_path.glob("dsv4-sglang-*.tar.gz"))
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "host/templates/sglang-dsv4.service.j2" in names
    assert not any(n.startswith((".venv", ".git/")) for n in names)
    installed = run(
        "ansible-galaxy", "collection", "install", "--force", str(tarball), "-p", str(tmp_path / "collections")
    )
    assert installed.returncode == 0, installed.stderr
    playbook = tmp_path / "fqcn.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Roles by fully qualified name",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    # The services' checks want an admin key; rendering needs only that there is one.
                    "vars": {"sglang_services_admin_key": "repository-test-admin-key-0123456789"},
                    "tasks": [
                        {
                            "name": "Runtime checks and launchers",
                            "ansible.builtin.include_role": {
                                "name": "dsv4.sglang.sglang_runtime",
                                "tasks_from": "preflight",
                            },
                            "vars": {
                                "sglang_runtime_kind": "lab_standin",
                                "sglang_runtime_environment": "lab",
                                "sglang_runtime_release_no_deps": True,
                                "sglang_runtime_server_lock": str(
                                    tmp_path
                                    / "collections/ansible_collections/dsv4/sglang/roles/lab_hosts/files/locks"
                                    / "sglang-0.5.23-nodeps.txt"
                                ),
                            },
                        },
                        {
                            "name": "Service checks",
                            "ansible.builtin.include_role": {
                                "name": "dsv4.sglang.sglang_services",
                                "tasks_from": "preflight",
                                "public": True,
                            },
                            "vars": {"sglang_runtime_kind": "lab_standin"},
                        },
                        {
                            "name": "Units rendered from the installed collection's template",
                            "dsv4.sglang.sglang_desired_state": {
                                "layout": "{{ _sglang_common_layout }}",
                                "services": "{{ _sglang_services_desired_settings }}",
                            },
                            "vars": {"sglang_runtime_kind": "lab_standin"},
                            "register": "__sglang_desired_state",
                        },
                        {
                            "name": "Keep it as the host's desired state",
                            "ansible.builtin.set_fact": {"sglang_desired": "{{ __sglang_desired_state.document }}"},
                        },
                        {
                            "name": "Write the prefill unit",
                            "ansible.builtin.copy": {
                                "dest": str(tmp_path / "units/sglang-dsv4-prefill.service"),
                                "content": "{{ (sglang_desired.files | selectattr('unit', 'defined')"
                                " | first).content }}",
                                "mode": "0644",
                            },
                            "vars": {"ansible_python_interpreter": sys.executable},
                        },
                    ],
                }
            ]
        )
    )
    (tmp_path / "units").mkdir()
    env_root = tmp_path / "run"
    env_root.mkdir()
    (env_root / "empty.cfg").write_text("[defaults]\n")
    out = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        cwd=env_root,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"),
            "ANSIBLE_CONFIG": str(env_root / "empty.cfg"),
            "ANSIBLE_ROLES_PATH": str(tmp_path / "none"),
        },
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert (tmp_path / "units/sglang-dsv4-prefill.service").exists()


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / "README.md").read_text()
    assert (ROOT / ".ci/run").read_text().strip().endswith("exec make test")


def test_lab_api_key_is_vault_encrypted_and_production_holds_no_secret():
    lab = (ROOT / "inventories/lab/group_vars/sglang_dsv4/keys.yml").read_text()
    assert "sglang_services_api_key: !vault |" in lab
    assert "$ANSIBLE_VAULT;1.2;AES256;lab" in lab
    production = "".join(p.read_text() for p in (ROOT / "inventories/production").rglob("*.yml"))
    assert re.search(r"^\s*sglang_services_api_key:", production, re.MULTILINE) is None


def test_nothing_is_encrypted_with_the_lab_vault_password():
    """`ansible-vault encrypt_string` in the repository needs the production vault id; it never takes the lab one."""
    vault = str(Path(sys.executable).parent / "ansible-vault")
    out = subprocess.run(
        [vault, "encrypt_string", "--stdin-name", "sglang_services_admin_key"],
        cwd=ROOT,
        input="a-production-key-0123456789",
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0 and "$ANSIBLE_VAULT" not in out.stdout
    assert "Did not find a match for --encrypt-vault-id=prod" in out.stderr, out.stderr


def documented_vault_commands() -> list[str]:
    """Every `ansible-vault ...` and `--vault-id ...` the README, the guides and the production inventory tell
    operators."""
    texts = [
        (ROOT / "README.md").read_text(),
        *(p.read_text() for p in sorted((ROOT / "docs/docsite/rst").glob("*.rst"))),
        (ROOT / "inventories/production/group_vars/sglang_dsv4.yml").read_text(),
    ]
    # A command, without the comment after it ("(clients' key)").
    commands = [
        m.group(0).split("(")[0].strip() for t in texts for m in re.finditer(r"ansible-vault encrypt_string [^\n`]*", t)
    ]
    ids = {m.group(1) for t in texts for m in re.finditer(r"--vault-id (\w+)@prompt", t)}
    return commands, ids


def test_the_documented_vault_commands_work_as_written(tmp_path):
    """The README's, the guides' and the production inventory's commands, run as written with a password file in
    place of the prompt: the value is encrypted with the production id, and a play given that id decrypts it."""
    commands, ids = documented_vault_commands()
    assert commands and ids == {"prod"}, (commands, ids)
    password = tmp_path / "prod-password"
    password.write_text("a-production-vault-password\n")
    bin_dir = Path(sys.executable).parent
    group_vars = tmp_path / "inventory" / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    for number, command in enumerate(commands):
        argv = shlex.split(command)
        argv = [str(bin_dir / argv[0]), *(a.replace("prod@prompt", f"prod@{password}") for a in argv[1:])]
        assert "--name" in argv, command
        name = argv[argv.index("--name") + 1]
        out = subprocess.run(
            [*argv, f"secret-{number}-0123456789abcdef"], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, (command, out.stderr)
        assert out.stdout.startswith(f"{name}: !vault |") and "$ANSIBLE_VAULT;1.2;AES256;prod" in out.stdout
        (group_vars / f"{name}.yml").write_text(out.stdout.replace(f"{name}: !vault", f"---\n{name}: !vault", 1))
    (tmp_path / "inventory" / "hosts.yml").write_text("all:\n  hosts:\n    localhost:\n")
    names = [shlex.split(c)[shlex.split(c).index("--name") + 1] for c in commands]
    shown = subprocess.run(
        [
            str(bin_dir / "ansible"),
            "localhost",
            "-i",
            str(tmp_path / "inventory"),
            "-c",
            "local",
            "--vault-id",
            f"prod@{password}",
            "-m",
            "debug",
            "-a",
            f"msg={{{{ [{', '.join(names)}] }}}}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr + shown.stdout
    assert all(f"secret-{n}-0123456789abcdef" in shown.stdout for n in range(len(commands))), shown.stdout


def test_ansible_temp_files_are_private_to_the_connecting_user():
    config = (ROOT / "ansible.cfg").read_text()
    assert re.search(r"^remote_tmp = ~/\.ansible/tmp$", config, re.MULTILINE)


def test_the_docsite_holds_every_guide_and_a_page_for_every_role():
    """Each guide of docs/docsite/rst is listed in extra-docs.yml (and each listed one exists), and scripts/docsite.py
    checks a generated page for every role; `make test` builds the site (scripts/test.sh, docs)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import docsite

    pages = docsite.expected_pages()
    assert {f"{role}_role.html" for role in ROLES} <= set(pages)
    listed = {p.removeprefix("docsite/").removesuffix(".html") for p in pages if p.startswith("docsite/")}
    assert listed == {p.stem for p in (ROOT / "docs/docsite/rst").glob("*.rst")}
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "the README is one page: the rest goes into a guide"
    assert all(f"docs/docsite/rst/{guide}.rst" in readme for guide in listed), "the README links every guide"


def test_every_role_variable_has_a_bad_input_case():
    cases = yaml.safe_load((ROOT / "tests/bad_inputs.yml").read_text())
    covered = {name for table in cases.values() for case in table for name in case["vars"]}
    for role in ROLES:
        specs = yaml.safe_load((ROOT / f"roles/{role}/meta/argument_specs.yml").read_text())["argument_specs"]
        missing = set(specs[VARIABLES_ENTRY.get(role, "main")]["options"]) - covered
        assert not missing, f"{role}: no case in tests/bad_inputs.yml for {sorted(missing)}"


PRODUCTION_ROLES = [
    "sglang_common",
    "sglang_runtime",
    "sglang_genconfig",
    "sglang_services",
    "sglang_verify",
    "sglang_monitoring",
]
# A private fact of a role (_ROLE_x, __ROLE_x), or anything of the orchestrator (sglang_rollout_x: its plan, lock
# and decisions), named in a task, a variable, a handler or a template.
FOREIGN = re.compile(r"(?<![\w.])(?:_{1,2}sglang_(?P<role>[a-z]+)_\w+|sglang_rollout_\w+)")


@pytest.mark.parametrize("role", PRODUCTION_ROLES)
def test_a_production_role_reads_its_parameters_not_another_roles_private_facts(role):
    """A role is a function of its parameters: it reads its own variables, its dependencies' (meta/main.yml), and
    what its caller passes as its parameters; never the orchestrator's facts or another role's private ones."""
    meta = yaml.safe_load((ROOT / f"roles/{role}/meta/main.yml").read_text())
    own = {role, *(d if isinstance(d, str) else d["role"] for d in meta.get("dependencies") or [])}
    found = []
    for path in sorted((ROOT / "roles" / role).rglob("*")):
        if path.suffix not in {".yml", ".j2"} or "tests" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for match in FOREIGN.finditer(line):
                if match["role"] is None or f"sglang_{match['role']}" not in own:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {match[0]}")
    assert not found, "\n".join(found)


def test_no_import_of_the_services_role_carries_a_condition_or_variables_its_handler_would_inherit():
    """Ansible gives a role's handlers the `when` and `vars` of the role's imports: a condition on one import of
    sglang_services (a step that should run only sometimes) skipped its restart handler on every first deploy."""
    found = []
    for path in sorted((ROOT / "playbooks").glob("**/*.yml")):

        def walk(tasks, where):
            for task in tasks or []:
                if not isinstance(task, dict):
                    continue
                target = task.get("ansible.builtin.import_role") or task.get("import_role")
                if isinstance(target, dict) and target.get("name") == "dsv4.sglang.sglang_services":
                    if "when" in task or "vars" in task:
                        found.append(f"{where}: {task.get('name')}")
                for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
                    walk(task.get(key), where)

        walk(yaml.safe_load(path.read_text()), path.name)
    assert not found, found


def test_the_shared_role_adds_no_task_where_another_role_depends_on_it():
    """Every role depends on sglang_common for the on-host layout (its vars). With a tasks/main.yml or a `main`
    argument spec, its validation and checks would run wherever Ansible runs the dependency again (two workers per
    host each time). Its checks are an entry point of their own, run once by the plan."""
    specs = yaml.safe_load((ROOT / "roles/sglang_common/meta/argument_specs.yml").read_text())["argument_specs"]
    assert "main" not in specs and "preflight" in specs
    assert not (ROOT / "roles/sglang_common/tasks/main.yml").exists()
    dependents = [
        p.parent.parent.name for p in (ROOT / "roles").glob("*/meta/main.yml") if "sglang_common" in p.read_text()
    ]
    assert len(dependents) >= 6, dependents
