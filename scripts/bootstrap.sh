# Sourced by ./run and ./test: make .venv and install the project into it when needed.
# Usage: source scripts/bootstrap.sh [dev]
set -euo pipefail
GAIA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$GAIA_ROOT"

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Gaia needs Python 3.11 or newer (found: $("$PYTHON" --version 2>&1))." >&2
  exit 1
fi

extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv ..."
  "$PYTHON" -m venv .venv
fi

target="."
[ "$extras" = "dev" ] && target=".[dev]"
# The local model runtime builds from source. Its multimodal part is not needed, and the
# build targets AVX2 rather than "whatever this CPU has": on hosts that report Intel AMX
# (Sapphire Rapids) but do not let a process use it, a native build crashes on its first
# multi-token prompt.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF}"
stamp=".venv/.gaia-install-$extras"
want="$( (cat pyproject.toml; echo "$CMAKE_ARGS") | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Installing Gaia and its dependencies into .venv (the first time builds llama.cpp:" \
       "several minutes on 2 cores; later installs reuse pip's wheel cache) ..."
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e "$target"
  echo "$want" > "$stamp"
fi
export PATH="$GAIA_ROOT/.venv/bin:$PATH"

# The test suite's own needs (./test): the real client programs it drives and Debian's
# Chromium for the browser tests, installed here so no test reaches a registry. Each is
# installed once (and said so); a failure stops the set-up with what to do.
if [ "$extras" = "dev" ]; then
  apt_install() {  # apt_install WHAT PACKAGE...
    local sudo_cmd=""
    if [ "$(id -u)" -ne 0 ]; then
      if ! command -v sudo >/dev/null 2>&1; then
        echo "The tests need $1; install it as root: apt-get install -y ${*:2}" >&2
        exit 1
      fi
      sudo_cmd="sudo"
    fi
    echo "Installing $1 for the tests (Debian: ${*:2}) ..."
    if ! { $sudo_cmd apt-get update -qq && \
           $sudo_cmd apt-get install -y -qq "${@:2}" >/dev/null; }; then
      echo "Could not install $1 (apt-get install -y ${*:2}); the tests need it." >&2
      exit 1
    fi
  }
  command -v npm >/dev/null 2>&1 || apt_install "Node.js and npm (for the client programs)" \
    nodejs npm
  # Cached in var/clients: after the first time this only checks its stamps.
  .venv/bin/python -m tests.clients.install
  chromium="${GAIA_CHROMIUM:-/usr/bin/chromium}"
  [ -x "$chromium" ] || apt_install "Chromium (for the browser tests)" chromium
  # A real Prometheus scrapes /metrics in tests/test_metrics.py (Debian's package, as Chromium).
  command -v prometheus >/dev/null 2>&1 || apt_install "Prometheus (for the metrics tests)" \
    prometheus
fi
