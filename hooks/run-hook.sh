# Runs one of the plugin's hook scripts (hooks.json: `sh run-hook.sh NAME.py`) with the Python
# that `python3` resolved to the first time, remembered in the user's cache, not through
# `python3` on every call: a version manager's shim (pyenv, asdf) costs about 90 ms a call, paid
# on every prompt and every edit. The hooks use the standard library alone, so any Python 3 runs
# them. A remembered Python that is gone (uninstalled, upgraded) is looked up again; when nothing
# can be remembered, `python3` runs the hook as before.
hooks=${0%/*}
cache=${XDG_CACHE_HOME:-${HOME:-}/.cache}/librarian/hook-python
python=
if [ -r "$cache" ]; then
    read -r python < "$cache" || python=
fi
if [ -z "$python" ] || [ ! -x "$python" ]; then
    python=$(python3 -E -S -c 'import sys; print(sys.executable)' 2>/dev/null) || python=
    if [ -n "$python" ] && [ -x "$python" ]; then
        # Written whole or not at all: another hook may be reading it at the same moment.
        { mkdir -p "${cache%/*}" && printf '%s\n' "$python" > "$cache.$$" &&
            mv -f "$cache.$$" "$cache"; } 2>/dev/null || rm -f "$cache.$$" 2>/dev/null
    else
        python=python3
    fi
fi
case ${1:-} in
    # `librarian connect AGENT --server URL`: the server is the configuration's, not the shell's.
    --server=*) LIBRARIAN_MCP_URL=${1#--server=}; export LIBRARIAN_MCP_URL; shift ;;
esac
script=$1
shift  # what follows the script's name is its own: the agent whose hook it is
exec "$python" -E -S "$hooks/$script" "$@"
