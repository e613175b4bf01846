"""What the tests import: lf_testlib (beside them), and lease_fence.

From a checkout (``python3 -m pytest`` in clients/python) the package under
test is this checkout's src/lease_fence, copied with the repository's
scripts/*.lua (the wheel ships them there) into a temporary directory that
goes first on sys.path: nothing is written into the source tree. With
LF_EXPECT_INSTALLED set (ci.sh) the installed package is tested, as it is.
"""

import atexit
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _checkout_package() -> None:
    src = os.path.join(HERE, "..", "src", "lease_fence")
    scripts = os.path.join(HERE, "..", "..", "..", "scripts")
    if not os.path.isdir(src):
        return                  # tests copied without the sources: the installed package
    top = tempfile.mkdtemp(prefix="lease_fence_pytest.")
    atexit.register(shutil.rmtree, top, True)
    pkg = os.path.join(top, "lease_fence")
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__", "scripts"))
    os.mkdir(os.path.join(pkg, "scripts"))
    for name in ("acquire.lua", "renew.lua", "release.lua", "check.lua"):
        # missing: client_side's import says so (the test of the built package)
        if os.path.isfile(os.path.join(scripts, name)):
            shutil.copyfile(os.path.join(scripts, name), os.path.join(pkg, "scripts", name))
    sys.path.insert(0, top)


if not os.environ.get("LF_EXPECT_INSTALLED"):
    _checkout_package()
