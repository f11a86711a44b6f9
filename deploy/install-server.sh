#!/usr/bin/env bash
# Install Librarian's user units on this server, keep them running without a login, start them.
#
#   deploy/install-server.sh              as the user Librarian runs as, from its checkout
#   deploy/install-server.sh --render DIR only write the units, with this checkout's paths, to DIR
#
# Before: `bash scripts/run` once (it makes .venv; Ctrl-C when it is up) and
# ~/.config/librarian/librarian.env written (deploy/README.md).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
units=(librarian.service librarian-alert@.service)

render() {
    # The units name the checkout as ~/librarian (%h/librarian); this one may be elsewhere.
    case $repo in
    *[[:space:]\|\&\\]*)
        echo "install-server.sh: move the checkout to a path without spaces, |, & or \\: $repo" >&2
        exit 1
        ;;
    esac
    mkdir -p "$1"
    for unit in "${units[@]}"; do
        sed "s|%h/librarian/|$repo/|g" "$repo/deploy/systemd/$unit" >"$1/$unit"
    done
}

if [ "${1:-}" = --render ]; then
    render "${2:?usage: install-server.sh --render DIR}"
    exit 0
fi

env_file=${XDG_CONFIG_HOME:-$HOME/.config}/librarian/librarian.env
if [ ! -e "$repo/.venv/bin/librarian" ]; then
    echo "install-server.sh: no $repo/.venv yet: run 'bash scripts/run' once first" >&2
    exit 1
fi
if [ ! -f "$env_file" ]; then
    echo "install-server.sh: write $env_file first (deploy/README.md)" >&2
    exit 1
fi
chmod 600 "$env_file" # it holds the bot token

render "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
# Without lingering, user units start at the user's first login, not at boot.
loginctl enable-linger "$USER"
systemctl --user daemon-reload
# An alert path never tried is no guard: send one message now, and stop here if it fails.
if ! systemctl --user start librarian-alert@test.service; then
    echo "install-server.sh: the test alert failed: journalctl --user -u librarian-alert@test.service" >&2
    exit 1
fi
systemctl --user enable --now librarian.service
systemctl --user --no-pager status librarian.service
