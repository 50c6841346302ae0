"""The execution environment as AWX runs it: execution-environment.yml's context, its image, and deploy.yml run
through ansible-runner inside that image onto the lab host (its first deploy, a sampling change, a run that changes
nothing), judged from the runner's artifacts and from the host.

The image is built with podman from a base made here (the lab hosts' Debian 12 tree, imported; no registry is
reachable), with the lab's podman settings (../containers.conf); everything else is what an AWX user builds.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, host_state, instance, runs_from_disk

SCENARIO = Path(__file__).resolve().parents[1]
EE_FILE = ROOT / "execution-environment.yml"
TOOLS = ROOT / ".venv-ee" / "bin"
IMAGE = "localhost/dsv4-sglang-ee:lab"
HOST = "dsv4-ee-1"
PORT_BASE = 22010
TEMPERATURE = 0.7
# podman's own settings for this machine, and the host's CA bundle for pip inside the build (PyPI's certificate).
ENV = {**os.environ, "CONTAINERS_CONF": str(SCENARIO / "containers.conf")}
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
LAB_LOCKS = "/var/cache/sglang-dsv4/lab-wheelhouse/locks"


def run(*argv: str, timeout: int = 1500, cwd: Path | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-6000:]}{done.stderr[-3000:]}"
    )
    return done


def pin(requirements: Path, name: str) -> str:
    found = re.search(rf"^{re.escape(name)}==(\S+)$", requirements.read_text(), re.MULTILINE | re.IGNORECASE)
    assert found, f"{requirements.name} pins no {name}"
    return found.group(1)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """The collection tarball make test installs (scripts/test.sh), or one built here when run by hand."""
    installed = os.environ.get("DSV4_COLLECTIONS_PATH")
    if installed:
        built = glob.glob(str(Path(installed).parent / "dsv4-sglang-*.tar.gz"))
        assert len(built) == 1, built
        return Path(built[0])
    work = tmp_path_factory.mktemp("collection")
    run(str(ROOT / ".venv/bin/ansible-galaxy"), "collection", "build", "--output-path", str(work), cwd=ROOT)
    return next(work.glob("dsv4-sglang-*.tar.gz"))


@pytest.fixture(scope="module")
def context(tmp_path_factory, tarball) -> Path:
    """`ansible-builder create` of execution-environment.yml, with the tarball where the file expects it."""
    work = tmp_path_factory.mktemp("ee")
    shutil.copy(EE_FILE, work)
    (work / "ee-collection").mkdir()
    shutil.copy(tarball, work / "ee-collection/dsv4-sglang.tar.gz")
    run(str(TOOLS / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", "context", cwd=work)
    return work


def test_the_context_holds_the_collection_users_install_and_the_pinned_ansible(context, tarball):
    build = context / "context/_build"
    assert (build / "collection/dsv4-sglang.tar.gz").read_bytes() == tarball.read_bytes()
    assert yaml.safe_load((build / "requirements.yml").read_text()) == {
        "collections": [{"name": "collection/dsv4-sglang.tar.gz", "type": "file"}]
    }
    containerfile = (context / "context/Containerfile").read_text()
    core, runner = pin(ROOT / "requirements.txt", "ansible-core"), pin(ROOT / "requirements-ee.txt", "ansible-runner")
    assert pin(ROOT / "requirements-ee.txt", "ansible-core") == core
    assert f'ARG ANSIBLE_INSTALL_REFS="ansible-core=={core} ansible-runner=={runner}"' in containerfile
    base = yaml.safe_load(EE_FILE.read_text())["images"]["base_image"]["name"]
    assert f'ARG EE_BASE_IMAGE="{base}"' in containerfile
    assert "openssh-client [platform:dpkg]" in (build / "bindep.txt").read_text()


@pytest.fixture(scope="module")
def lab_base() -> str:
    """The lab hosts' Debian tree as an image, with pip (Containerfile.lab-base); made once per tree."""
    trees = sorted(glob.glob("/var/lib/sglang-dsv4-lab/base-bookworm-*"), key=os.path.getmtime)
    assert trees, "no lab tree under /var/lib/sglang-dsv4-lab: the scenario's create boots from one"
    tag = Path(trees[-1]).name.rsplit("-", 1)[1]
    tree, base = f"localhost/dsv4-ee-lab-tree:{tag}", f"localhost/dsv4-ee-lab-base:{tag}"
    if subprocess.run(["podman", "image", "exists", base], env=ENV, check=False).returncode != 0:
        tar = subprocess.Popen(["tar", "-C", trees[-1], "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["podman", "import", "-", tree], stdin=tar.stdout, env=ENV, capture_output=True, check=False
        )
        assert tar.wait() == 0 and imported.returncode == 0, imported.stderr.decode()[-2000:]
        run(
            "podman",
            "build",
            "--network",
            "host",
            "--build-arg",
            f"TREE={tree}",
            "-f",
            str(SCENARIO / "Containerfile.lab-base"),
            "-t",
            base,
            str(SCENARIO),
        )
    return base


@pytest.fixture(scope="module")
def image(context, lab_base):
    """`ansible-builder build` as a user runs it, from the lab's base, with apt-get as the package manager."""
    run(
        str(TOOLS / "ansible-builder"),
        "build",
        "-f",
        "execution-environment.yml",
        "-c",
        "context",
        "-t",
        IMAGE,
        "--container-runtime",
        "podman",
        "--build-arg",
        f"EE_BASE_IMAGE={lab_base}",
        "--build-arg",
        "PKGMGR=/usr/bin/apt-get",
        "--build-arg",
        "PKGMGR_PRESERVE_CACHE=always",
        f"--extra-build-cli-args=--network host --volume {CA_BUNDLE}:{CA_BUNDLE}:ro",
        cwd=context,
    )
    yield IMAGE
    # The image and its build's intermediate layers go; the lab base stays, for the next run on this tree.
    subprocess.run(["podman", "rmi", "-f", IMAGE], env=ENV, capture_output=True, check=False)
    subprocess.run(["podman", "image", "prune", "-f"], env=ENV, capture_output=True, check=False)


def test_the_image_runs_the_pinned_ansible_and_the_collection_as_built(image):
    core, runner = pin(ROOT / "requirements.txt", "ansible-core"), pin(ROOT / "requirements-ee.txt", "ansible-runner")
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    out = run(
        "podman",
        "run",
        "--rm",
        image,
        "sh",
        "-c",
        "id -u; ansible --version | head -1; ansible-runner --version; ansible-galaxy collection list dsv4.sglang;"
        " ssh -V 2>&1",
    ).stdout
    uid, ansible_line, runner_line = out.splitlines()[:3]
    assert uid == "1000", out  # AWX runs jobs as an unprivileged user
    assert f"[core {core}]" in ansible_line, out
    assert runner_line.strip() == runner, out
    assert re.search(rf"^dsv4\.sglang\s+{re.escape(version)}\s*$", out, re.MULTILINE), out
    assert "OpenSSH" in out, out


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    """ansible-runner's private data directory, laid out as AWX lays out a job's: a project holding only the entry
    point and its ansible.cfg (the roles and plugins come from the image), the inventory with the lab group_vars,
    the machine credential's key, the vault password and the extra variables."""
    work = tmp_path_factory.mktemp("job")
    project = work / "project"
    project.mkdir()
    (project / "deploy.yml").write_text(
        "---\n- name: The collection's entry point\n  ansible.builtin.import_playbook: dsv4.sglang.deploy\n"
    )
    shutil.copy(ROOT / "inventories/lab/vault-password.txt", project / "vault-password.txt")
    (project / "ansible.cfg").write_text(
        "[defaults]\n"
        "collections_path = /usr/share/ansible/collections\n"  # the image's collection only
        "interpreter_python = auto_silent\n"
        "forks = 8\n"
        "callbacks_enabled = dsv4.sglang.sglang_preload\n"
        "vault_identity_list = lab@/runner/project/vault-password.txt\n"
        "[ssh_connection]\npipelining = true\n"
    )
    shutil.copytree(ROOT / "inventories/lab/group_vars", work / "inventory/group_vars", symlinks=False)
    lab = instance()
    hosts = {
        "sglang_dsv4": {
            "hosts": {
                HOST: {
                    "ansible_host": lab["address"],
                    "ansible_port": lab["port"],
                    "ansible_user": lab["user"],
                    "sglang_lab_port_base": PORT_BASE,
                }
            }
        }
    }
    (work / "inventory/hosts.yml").write_text(yaml.safe_dump(hosts))
    (work / "env").mkdir()
    (work / "env/ssh_key").write_text(Path(lab["identity_file"]).read_text())
    return work


def job(job_dir: Path, image: str, ident: str) -> dict:
    """One run of deploy.yml by ansible-runner in the image; what its artifacts say."""
    run(
        str(TOOLS / "ansible-runner"),
        "run",
        str(job_dir),
        "-p",
        "deploy.yml",
        "--ident",
        ident,
        "--process-isolation",
        "--process-isolation-executable",
        "podman",
        "--container-image",
        image,
        # The lab hosts listen on this machine's loopback. As root, podman runs the image's user (1000) against a
        # job folder and an SSH-key FIFO that ansible-runner makes root's own: --user=0, as ansible-runner itself
        # passes --user=<its uid> to docker (AWX's rootless podman maps the user instead).
        "--container-option=--network=host",
        "--container-option=--user=0",
        # The servers' lock is read on the controller (the lab keeps it in its wheelhouse, where the lab settings
        # name it; a production project keeps its own beside the inventory, inventories/production/locks).
        f"--container-volume-mount={LAB_LOCKS}:{LAB_LOCKS}:ro",
        # A job whose container never reads the key leaves ansible-runner waiting on its FIFO: bounded here.
        timeout=900,
    )
    artifacts = job_dir / "artifacts" / ident
    events = [json.loads(p.read_text()) for p in (artifacts / "job_events").glob("*.json")]
    stats = [e["event_data"] for e in events if e.get("event") == "playbook_on_stats"]
    assert len(stats) == 1, f"{len(stats)} playbook_on_stats events in {artifacts}"
    return {
        "status": (artifacts / "status").read_text().strip(),
        "rc": (artifacts / "rc").read_text().strip(),
        "command": json.loads((artifacts / "command").read_text())["command"],
        "stats": stats[0],
        "stdout": (artifacts / "stdout").read_text(),
    }


@pytest.fixture(scope="module")
def jobs(host, job_dir, image) -> dict[str, dict]:
    """The host's first deploy, a sampling change, then the same again: each a job of its own, with the host's state
    read after it."""
    booted = host.run("systemctl is-system-running --wait")  # what converge.yml waits for first
    assert booted.stdout.strip() in ("running", "degraded"), booted.stdout + booted.stderr
    change = {"sglang_genconfig_temperature": TEMPERATURE}
    done = {}
    for ident, extravars in (("first", {}), ("change", change), ("again", change)):
        (job_dir / "env/extravars").write_text(yaml.safe_dump(extravars))
        done[ident] = {**job(job_dir, image, ident), "state": host_state(host)}
    return done


def test_every_job_ran_inside_the_image_and_succeeded(jobs):
    for ident, done in jobs.items():
        assert (done["status"], done["rc"]) == ("successful", "0"), (ident, done["stdout"][-4000:])
        assert done["command"][0].endswith("podman") and IMAGE in done["command"], (ident, done["command"])
        assert not done["stats"]["failures"] and not done["stats"]["dark"], (ident, done["stats"])
        assert runs_from_disk(done["state"]) == [], ident


def test_the_change_restarts_prefill_and_decode_and_the_run_after_it_changes_nothing(jobs):
    first, change, again = (jobs[ident] for ident in ("first", "change", "again"))
    assert first["stats"]["changed"].get(HOST, 0) > 0, first["stats"]
    assert change["stats"]["changed"].get(HOST, 0) > 0, change["stats"]
    assert again["stats"]["changed"].get(HOST, 0) == 0 and again["stats"]["ok"].get(HOST, 0) > 0, again["stats"]
    units = {ident: jobs[ident]["state"]["units"] for ident in jobs}
    for server in ("prefill", "decode"):
        assert units["change"][server]["invocation"] != units["first"][server]["invocation"], server
        assert units["again"][server]["invocation"] == units["change"][server]["invocation"], server
    assert units["change"]["router"]["invocation"] == units["first"]["router"]["invocation"]


def test_the_host_serves_the_new_defaults_from_what_the_image_wrote(host, jobs):
    genconfig = json.loads(host.file("/srv/models/DeepSeek-V4-Flash/generation_config.json").content_string)
    assert genconfig["temperature"] == TEMPERATURE
    default = yaml.safe_load((ROOT / "roles/sglang_genconfig/defaults/main.yml").read_text())
    for ident, expected in (
        ("first", default["sglang_genconfig_temperature"]),
        ("change", TEMPERATURE),
        ("again", TEMPERATURE),
    ):
        for server in ("prefill", "decode"):
            logged = jobs[ident]["state"]["units"][server]["logged"] or {}
            assert logged.get("temperature") == expected, (ident, server, logged)
