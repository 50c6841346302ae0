"""Writing a role's part of the desired state (modules/sglang_managed_files.py): exactly, root-owned, never through
a link or into a folder another account could have planted."""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.dsv4.sglang.plugins.modules import sglang_managed_files as managed

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module writes root-owned files: run as root")


class DoneError(Exception):
    """module.exit_json, caught."""


class RefusedError(Exception):
    """module.fail_json, caught."""


class Module:
    def __init__(self, check_mode: bool = False, **params) -> None:
        self.check_mode = check_mode
        self.params = {"directories": [], "into": None, **params}

    def exit_json(self, **result):
        raise DoneError(result)

    def fail_json(self, msg: str, **result):
        raise RefusedError(msg)


def run(**params) -> dict:
    with pytest.raises(DoneError) as done:
        managed.write(Module(**params))
    return done.value.args[0]


def refused(**params) -> str:
    with pytest.raises(RefusedError) as why:
        managed.write(Module(**params))
    return str(why.value)


@pytest.fixture
def folder(tmp_path):
    os.chmod(tmp_path, 0o755)  # noqa: S103 - a folder like the layout's, root-owned and not group-writable
    return tmp_path


def test_files_get_exactly_their_content_and_mode_and_a_second_run_changes_nothing(folder):
    files = [
        {"path": str(folder / "conf/a.env"), "mode": "0600", "content": "A=1\n", "role": "services"},
        {"path": str(folder / "conf/b.json"), "mode": "0644", "content": "{}\n", "secret": True},
    ]
    result = run(files=files, directories=[{"path": str(folder / "conf"), "mode": "0755"}])
    assert result["changed"] and result["written"] == [f["path"] for f in files]
    assert (folder / "conf/a.env").read_text() == "A=1\n"
    assert stat.S_IMODE(os.stat(folder / "conf/a.env").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder / "conf").st_mode) == 0o755
    again = run(files=files, directories=[{"path": str(folder / "conf"), "mode": "0755"}])
    assert not again["changed"] and again["written"] == [] and again["removed"] == []


def test_a_mode_that_drifted_is_put_back_and_a_null_content_removes_the_file(folder):
    path = folder / "key"
    path.write_text("old")
    os.chmod(path, 0o644)
    assert run(files=[{"path": str(path), "mode": "0600", "content": "old"}])["written"] == [str(path)]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert run(files=[{"path": str(path), "mode": "0600", "content": None}])["removed"] == [str(path)]
    assert not path.exists()
    assert not run(files=[{"path": str(path), "mode": "0600", "content": None}])["changed"]


def test_a_planted_link_is_replaced_never_followed(folder):
    victim = folder / "victim"
    victim.write_text("keep me")
    path = folder / "unit.service"
    path.symlink_to(victim)
    run(files=[{"path": str(path), "mode": "0644", "content": "[Unit]\n"}])
    assert victim.read_text() == "keep me" and not path.is_symlink() and path.read_text() == "[Unit]\n"


@pytest.mark.parametrize("plant", ["link", "world-writable", "not-a-folder"])
def test_a_folder_another_account_could_have_planted_is_refused_before_any_write(folder, plant):
    first = folder / "first.conf"
    bad = folder / "bad"
    if plant == "link":
        (folder / "elsewhere").mkdir()
        bad.symlink_to(folder / "elsewhere")
    elif plant == "world-writable":
        bad.mkdir()
        os.chmod(bad, 0o777)  # noqa: S103 - the planted folder the module must refuse
    else:
        bad.write_text("")
    files = [
        {"path": str(first), "mode": "0644", "content": "x"},
        {"path": str(bad / "x.conf"), "mode": "0644", "content": "y"},
    ]
    assert f"refusing to write into {bad}" in refused(files=files)
    assert not first.exists()


def test_check_mode_says_what_it_would_write_and_remove_and_changes_nothing(folder):
    gone = folder / "gone"
    gone.write_text("x")
    files = [
        {"path": str(folder / "new/a"), "mode": "0644", "content": "a"},
        {"path": str(gone), "mode": "0600", "content": None},
    ]
    result = run(check_mode=True, files=files, directories=[{"path": str(folder / "new"), "mode": "0755"}])
    assert result["written"] == [str(folder / "new/a")] and result["removed"] == [str(gone)]
    assert not (folder / "new").exists() and gone.exists()


def test_into_stages_each_file_under_its_name(folder):
    stage = folder / "stage"
    files = [{"path": "/etc/systemd/system/x.service", "mode": "0644", "content": "[Unit]\n"}]
    result = run(files=files, directories=[{"path": str(stage), "mode": "0755"}], into=str(stage))
    assert result["written"] == [str(stage / "x.service")] and (stage / "x.service").read_text() == "[Unit]\n"


def test_missing_parents_of_a_folder_are_made_root_owned(folder):
    deep = folder / "usr/local/libexec/sglang-dsv4"
    files = [{"path": str(deep / "x.py"), "mode": "0755", "content": "print()\n"}]
    assert run(files=files, directories=[{"path": str(deep), "mode": "0755"}])["written"] == [str(deep / "x.py")]
    assert stat.S_IMODE(os.stat(folder / "usr/local").st_mode) == 0o755 and (deep / "x.py").read_text() == "print()\n"


def test_a_folder_is_never_made_under_a_planted_parent(folder):
    (folder / "open").mkdir()
    os.chmod(folder / "open", 0o777)  # noqa: S103 - the planted parent the module must refuse
    assert "refusing to make" in refused(files=[], directories=[{"path": str(folder / "open/a/b"), "mode": "0755"}])
    assert not (folder / "open/a").exists()


def test_the_release_after_the_write_removes_only_this_runs_lock(folder):
    from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_lock

    (folder / "run").mkdir(mode=0o755)
    lock = str(folder / "run" / "deploy")
    assert sglang_lock.acquire(lock, "other-run", "bob@ctl", 600)[0]
    files = [{"path": str(folder / "rollout.json"), "mode": "0644", "content": "{}"}]
    result = run(files=files, release={"path": lock, "run_id": "this-run"})
    assert result["written"] == [files[0]["path"]] and result["released"] is False
    assert sglang_lock.inspect(lock)["run_id"] == "other-run"
    sglang_lock.release(lock, "other-run")
    assert sglang_lock.acquire(lock, "this-run", "root@ctl", 600)[0]
    assert run(files=files, release={"path": lock, "run_id": "this-run"})["released"] is True
    assert sglang_lock.inspect(lock) is None
