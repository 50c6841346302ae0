"""The restart module's cleaning of what a rolled-back first deploy left (module_utils/sglang_restart.py)."""

from __future__ import annotations

import os

from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_restart as restart


def test_enable_links_whose_unit_file_is_gone_are_removed_and_their_empty_wants_folders(tmp_path):
    unit_dir = tmp_path / "system"
    (unit_dir / "multi-user.target.wants").mkdir(parents=True)
    (unit_dir / "sglang-dsv4.target.wants").mkdir()
    # The restore removed the unit files; the links systemctl enable made are left dangling.
    os.symlink(unit_dir / "sglang-dsv4.target", unit_dir / "multi-user.target.wants/sglang-dsv4.target")
    os.symlink(
        unit_dir / "sglang-dsv4-prefill.service", unit_dir / "sglang-dsv4.target.wants/sglang-dsv4-prefill.service"
    )
    # Someone else's unit, and a link of ours whose unit file is still there: both kept.
    (unit_dir / "other.service").write_text("[Unit]\n")
    os.symlink(unit_dir / "other.service", unit_dir / "multi-user.target.wants/other.service")
    (unit_dir / "sglang-dsv4-router.service").write_text("[Unit]\n")
    os.symlink(unit_dir / "sglang-dsv4-router.service", unit_dir / "multi-user.target.wants/sglang-dsv4-router.service")
    removed = restart.unlink_dangling(
        str(unit_dir), ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4.target"]
    )
    assert sorted(removed) == sorted(
        [
            str(unit_dir / "multi-user.target.wants/sglang-dsv4.target"),
            str(unit_dir / "sglang-dsv4.target.wants/sglang-dsv4-prefill.service"),
            str(unit_dir / "sglang-dsv4.target.wants"),
        ]
    )
    assert sorted(os.listdir(unit_dir / "multi-user.target.wants")) == ["other.service", "sglang-dsv4-router.service"]
    assert restart.unlink_dangling(str(unit_dir), ["sglang-dsv4-prefill", "sglang-dsv4.target"]) == []
