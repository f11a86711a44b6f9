# Sourced by scripts/run, scripts/test and .ci/run: puts a `uv` on PATH, installing it if needed.
# uv comes from PyPI into a private virtualenv (.tools/), which works where pip may not install
# into the system Python (PEP 668 "externally managed" distributions).
UV_VERSION="0.13.9"
if ! command -v uv >/dev/null 2>&1; then
    tools="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.tools"
    if [ ! -x "$tools/bin/uv" ]; then
        python3 -m venv "$tools"
        "$tools/bin/python" -m pip install --quiet "uv==$UV_VERSION"
    fi
    export PATH="$tools/bin:$PATH"
fi
