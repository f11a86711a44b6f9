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
# The interpreter every environment here is made with (uv's own UV_PYTHON, which a user's setting
# overrides): Debian's python3.11 where there is one, one static binary built with profile-guided
# optimisation; elsewhere any 3.11 uv finds. Beside pyenv's (libpython shared, no
# --enable-optimizations), the test suite took 12% less time on it (decision 0027).
if [ -z "${UV_PYTHON:-}" ]; then
    UV_PYTHON=3.11
    [ -x /usr/bin/python3.11 ] && UV_PYTHON=/usr/bin/python3.11
    export UV_PYTHON
fi
