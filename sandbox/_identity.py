"""Who runs what inside a sandbox, and where things are mounted. Shared by both backends.

These ids are fixed by the image (``build_image.sh`` writes the same numbers into its /etc/passwd). They
are high on purpose so that they collide with no real user on a host: with a rootful Docker daemon and
with bubblewrap, the tuner's processes run as this uid on the host too.
"""

from __future__ import annotations

TUNER_UID = 61000
TUNER_GID = 61000
# The container's idle init runs as a different unprivileged uid, so the tuner's `kill -9 -1` (sent to
# end a runaway command) cannot stop the container itself.
KEEPER_UID = 61001
KEEPER_GID = 61001

WORKSPACE_IN_SANDBOX = "/workspace"
SITE_PACKAGES_IN_SANDBOX = "/opt/atb/site-packages"
RELEASE_FILE = "etc/atb-sandbox-release"

LABEL = "org.autotunebench.sandbox"
LABEL_OWNER_PID = "org.autotunebench.owner-pid"
LABEL_OWNER_HOST = "org.autotunebench.owner-host"
LABEL_WORKSPACE = "org.autotunebench.workspace"
IMAGE_LABEL_PYTHON = "org.autotunebench.python"
