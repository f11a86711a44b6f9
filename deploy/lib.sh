# shellcheck shell=bash
# What install-server.sh and install-laptop.sh share. Each sets `units` (the files under deploy/
# it installs) and then sources this file.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
installer=$(basename "$0")
# shellcheck disable=SC2034 # used by the installers that source this file
librarian=$repo/.venv/bin/librarian
# The path the units name (%h/.config/...), whatever XDG_CONFIG_HOME says: checked here, read there.
env_file=$HOME/.config/librarian/librarian.env

fail() {
    echo "$installer: $*" >&2
    exit 1
}

# render DIR FILE...: each deploy/FILE into DIR, naming this checkout and the server's URL
# (`server_url`, the laptop's installer sets it) where the templates say %h/librarian/ and
# @SERVER_URL@.
render() {
    # sed's replacement, and the plist's XML, must take the paths as they are.
    case $repo$HOME in
    *[[:space:]\|\&\\\<\>]*)
        fail "move the checkout and home to paths without spaces, |, &, <, > or \\: $repo"
        ;;
    esac
    local out=$1 file
    shift
    mkdir -p "$out"
    for file in "$@"; do
        local script=(-e "s|%h/librarian/|$repo/|g" -e "s|@SERVER_URL@|${server_url:-}|g")
        # systemd expands %h itself; launchd expands nothing, so its plist names the home.
        case $file in
        *.plist) script+=(-e "s|%h/|$HOME/|g") ;;
        esac
        sed "${script[@]}" "$repo/deploy/$file" >"$out/$(basename "$file")"
    done
}

install_units() {
    render "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user" "$@"
}

# `--render DIR`: only write the units, with this checkout's paths, to DIR; nothing else.
# shellcheck disable=SC2154 # units: the installer sets it before it sources this file
render_if_asked() {
    if [ "${1:-}" = --render ]; then
        render "${2:?usage: $installer --render DIR}" "${units[@]}"
        exit 0
    fi
}

need_env_file() {
    [ -f "$env_file" ] || fail "write $env_file first (deploy/README.md)"
    chmod 600 "$env_file" # it holds the tokens
}

# A command run with the env file's settings, as the units run theirs.
with_env() {
    /bin/sh "$repo/deploy/with-env" "$env_file" "$@"
}

# The env file's value of $1, empty when it sets none (the installer's own environment aside).
env_value() {
    env -i /bin/sh "$repo/deploy/with-env" "$env_file" /usr/bin/env | sed -n "s/^$1=//p"
}

# An alert path never tried is no guard: send one message now, and stop here if it fails.
send_test_alert() {
    systemctl --user start librarian-alert@test.service ||
        fail "the test alert failed: journalctl --user -u librarian-alert@test.service"
}
