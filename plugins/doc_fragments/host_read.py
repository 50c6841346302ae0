"""The options of the host's one read (module_utils/sglang_host_read.py), shared by sglang_host_state and
sglang_rollout_open."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  files:
    description: Managed files, each C(path), C(sha256) (null when the file must not exist), C(mode), C(role)
      (the role that writes it), and optionally C(content) for a diff (never for secrets or env files). A key
      file's C(sha256) is C(hmac-sha256:HEX), an HMAC under O(digest_key).
    type: list
    elements: dict
    required: true
  digest_key:
    description: The run's own key of the key files' HMAC digests (never logged).
    type: str
    default: ""
  generation_config:
    description: C(path) of generation_config.json and the managed C(sampling) values.
    type: dict
    required: true
  units:
    description: Services, each C(name), C(group) (servers or router), C(inputs) (paths it starts from),
      C(health_url).
    type: list
    elements: dict
    required: true
  releases:
    description: The runtime releases the units will run, each C(group), C(id), C(path), C(pins), C(describe)
      and C(size_mb) (room a build needs). Each is read on the host (built, changed by hand since its build,
      which the services of its group run now); the plan lists those to build in C(plan.build), and drift, an
      unsafe releases folder or too little room are C(check_errors).
    type: list
    elements: dict
    default: []
  users:
    description: Users that must exist.
    type: list
    elements: str
    default: []
  record_dir:
    description: Where the services record what they started from.
    type: path
    required: true
  lock_path:
    description: The rollout lock folder.
    type: path
    required: true
  drain_state:
    description: Where a drain keeps the router's workers it removed; when it exists, an earlier run's drain is
      pending and the plan puts the workers back (C(plan.undrain)).
    type: path
  against:
    description:
      - C(desired) (the plan, and the apply's read under the lock) compares each service's start record with the
        digest its inputs will have once this run's files are written.
      - C(disk) (after the writes, and after a rollback put the snapshot back) compares it with the files on
        disk now, so what restarts is decided from the content that is really there.
    type: str
    choices: [desired, disk]
    default: desired
  apply_roles:
    description: The roles this run applies (C(runtime), C(genconfig), C(services)), or null for all. Files of
      the other roles keep their content on disk in the plan; they are reported in C(plan.held), and a restart
      whose service has such an input is reported in C(plan.held_conflicts).
    type: list
    elements: str
  proof:
    description: Run the light proof when the plan is otherwise empty.
    type: bool
    default: true
  proof_failures:
    description: Light-proof failures found by the plan, per group; they still ask for a restart of that group.
    type: dict
    default: {}
  pool_restart:
    description: Why this host's servers restart with their PD pool across hosts (another host of the pool restarts
      its servers, found by the plan); they ask for a restart of the servers where nothing else does.
    type: list
    elements: str
    default: []
  expected_defaults:
    description: Sampling defaults each server must have logged at its current start (null values unchecked).
    type: dict
    default: {}
  checks:
    description: Host-side preconditions, reported in C(check_errors) with the variable to fix. C(model_path)
      and C(model_files) (present), C(writers) (the
      accounts besides root that may write the model directory and generation_config.json), C(gpus)
      (nvidia-smi lists exactly that many; 0 skips the check). Every command is bounded in time.
    type: dict
    default: {}
  report_changes:
    description: Report a non-empty plan as changed (for C(--check), where changed means "would change", and
      C(--diff) then shows the file diffs). The module itself never changes anything.
    type: bool
    default: false
  api_key:
    description: Client API key for the servers' C(/server_info) (never logged).
    type: str
    default: ''
"""
