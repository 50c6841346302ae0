"""Seeds ansible-test's pip bootstrap where its download host is not reachable.

`ansible-test sanity --venv` creates each venv without pip and downloads a get-pip script from
ci-files.testing.ansible.com, which this machine cannot reach (PyPI it can). scripts/sanity.sh copies this file
to the path ansible-test caches that script at; ansible-test then runs it, in the new venv, with pip-install
arguments. It bootstraps pip with the interpreter's own ensurepip and installs what ansible-test asked for.
"""

from __future__ import annotations

import ensurepip
import os
import subprocess
import sys

# ensurepip ignores pip's configuration (it sets PIP_CONFIG_FILE to /dev/null in this process); the install that
# follows must see the machine's pip configuration (index, certificates) again.
environment = dict(os.environ)
ensurepip.bootstrap(upgrade=True)
wanted = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *wanted]
sys.exit(subprocess.call(command, env=environment))
