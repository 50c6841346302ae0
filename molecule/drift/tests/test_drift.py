"""After drift was reported, healed at start and the unit put back by deploy.yml (molecule verify); then the model
directory gone as an unmounted share does: the plan stops, naming it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import deploy, flat, host_state, pids

GENCONFIG = "/srv/models/DeepSeek-V4-Flash/generation_config.json"


def test_file_holds_the_managed_defaults_and_upstream_keys(host):
    config = json.loads(host.file(GENCONFIG).content_string)
    assert (config["temperature"], config["top_p"], config["do_sample"]) == (0.6, 0.95, True)
    assert config["eos_token_id"] == [1, 128803, 128804]


def test_hand_edit_is_gone(host):
    assert "# edited by hand" not in host.file("/etc/systemd/system/sglang-dsv4-decode.service").content_string


def test_healer_is_installed_root_owned(host):
    healer = host.file("/usr/local/libexec/sglang-dsv4/sglang_helper.py")
    assert (healer.user, healer.mode) == ("root", 0o755)
    for module in ("sglang_files", "sglang_sampling_defaults", "sglang_records", "sglang_metrics"):
        installed = host.file(f"/usr/local/libexec/sglang-dsv4/{module}.py")
        assert (installed.user, installed.mode) == ("root", 0o644), module
    managed = json.loads(host.file("/etc/sglang-dsv4/sampling-defaults.json").content_string)
    assert managed["temperature"] == 0.6


def test_services_run(host):
    for unit in ("prefill", "decode", "router"):
        assert host.service(f"sglang-dsv4-{unit}").is_running


MODEL = "/srv/models/DeepSeek-V4-Flash"


def test_a_model_directory_that_is_a_dangling_link_stops_the_plan_naming_it_and_restarts_nothing(host):
    """The model directory replaced by a link to a share that is not mounted (as a mount that is not up looks): a
    run that would otherwise restart the servers (a sampling change) stops in its plan, naming the path; no file
    changes and no service restarts. Its weights have no version then, never the empty manifest's."""
    before = host_state(host)
    moved = host.run(f"mv {MODEL} {MODEL}.mounted && ln -s /mnt/share-not-up/DeepSeek-V4-Flash {MODEL}")
    assert moved.rc == 0, moved.stderr
    try:
        out = deploy("-e", json.dumps({"sglang_genconfig_temperature": 0.65}))
    finally:
        back = host.run(f"rm {MODEL} && mv {MODEL}.mounted {MODEL}")
    assert back.rc == 0, back.stderr
    said = flat(out)
    assert out.returncode != 0
    assert f"sglang_common_model_path={MODEL}: the model directory {MODEL} cannot be listed" in said, said[-4000:]
    assert "Take the lock, snapshot" not in out.stdout
    after = host_state(host)
    assert pids(after) == pids(before) and after["files"] == before["files"]
    # Put back, the plan reads the weights again and has nothing to do.
    again = deploy("--check")
    assert again.returncode == 0, flat(again)[-3000:]
