# shellcheck shell=bash
# What install-server.sh and install-laptop.sh share; each sets `units` (the files under
# deploy/systemd/ it installs) and then sources this file.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
installer=$(basename "$0")
env_file=${XDG_CONFIG_HOME:-$HOME/.config}/librarian/librarian.env

fail() {
    echo "$installer: $*" >&2
    exit 1
}

# shellcheck disable=SC2154 # units: the installer sets it before it sources this file
render() {
    # The units name the checkout as ~/librarian (%h/librarian); this one may be elsewhere.
    case $repo in
    *[[:space:]\|\&\\]*)
        fail "move the checkout to a path without spaces, |, & or \\: $repo"
        ;;
    esac
    mkdir -p "$1"
    for unit in "${units[@]}"; do
        sed "s|%h/librarian/|$repo/|g" "$repo/deploy/systemd/$unit" >"$1/$unit"
    done
}

install_units() {
    render "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
}

# `--render DIR`: only write the units, with this checkout's paths, to DIR; nothing else.
render_if_asked() {
    if [ "${1:-}" = --render ]; then
        render "${2:?usage: $installer --render DIR}"
        exit 0
    fi
}

need_env_file() {
    [ -f "$env_file" ] || fail "write $env_file first (deploy/README.md)"
    chmod 600 "$env_file" # it holds the bot token
}

# An alert path never tried is no guard: send one message now, and stop here if it fails.
send_test_alert() {
    systemctl --user start librarian-alert@test.service ||
        fail "the test alert failed: journalctl --user -u librarian-alert@test.service"
}
