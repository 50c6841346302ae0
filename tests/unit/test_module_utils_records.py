"""What each start is made of: the inputs' digests and the start record (module_utils/sglang_records.py)."""

from __future__ import annotations

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_records as records


def test_a_drop_in_folder_is_an_input_by_name_and_content(tmp_path):
    folder = tmp_path / "x.service.d"
    spec = str(folder) + "/"
    assert records.input_digest(spec) is None
    folder.mkdir()
    assert records.input_digest(spec) is None
    (folder / "notes.txt").write_text("ignored")
    assert records.input_digest(spec) is None
    (folder / "override.conf").write_text("[Service]\nEnvironment=A=1\n")
    first = records.input_digest(spec)
    (folder / "override.conf").write_text("[Service]\nEnvironment=A=2\n")
    assert first is not None and records.input_digest(spec) != first


def test_the_runtime_input_follows_installed_distribution_names_and_versions(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang_router-0.3.1.dist-info").mkdir(parents=True)
    spec = f"distributions:{tmp_path / 'venv'}"
    before = records.input_digest(spec)
    assert records.distributions(str(tmp_path / "venv")) == {"sglang_router": "0.3.1"}
    (site / "sglang_router-0.3.1.dist-info").rename(site / "sglang_router-0.3.2.dist-info")
    assert records.input_digest(spec) != before
    (site / "some_module.py").write_text("")  # not a distribution: no change
    after = records.input_digest(spec)
    assert records.input_digest(spec) == after


def test_record_keeps_the_runtime_it_started_from(tmp_path, monkeypatch):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    (site / "sglang-0.5.23.dist-info").mkdir(parents=True)
    monkeypatch.setenv("INVOCATION_ID", "inv-9")
    entry = records.record(str(tmp_path / "run/x.json"), [f"distributions:{tmp_path / 'venv'}"])
    assert entry["runtime"] == {str(tmp_path / "venv"): {"sglang": "0.5.23"}}
