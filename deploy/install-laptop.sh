#!/usr/bin/env bash
# Install the mirror push on the laptop: every five minutes, ~/.claude/projects goes to the server.
#
#   deploy/install-laptop.sh              from a checkout of Librarian on the laptop
#   deploy/install-laptop.sh --render DIR only write the units, with this checkout's paths, to DIR
#
# Before: an ssh key the server accepts (BatchMode: no prompt) and
# ~/.config/librarian/librarian.env with MIRROR_HOST, MIRROR_PATH and TELEGRAM_* (deploy/README.md).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
units=(librarian-mirror.service librarian-mirror.timer librarian-alert@.service)

render() {
    case $repo in
    *[[:space:]\|\&\\]*)
        echo "install-laptop.sh: move the checkout to a path without spaces, |, & or \\: $repo" >&2
        exit 1
        ;;
    esac
    mkdir -p "$1"
    for unit in "${units[@]}"; do
        sed "s|%h/librarian/|$repo/|g" "$repo/deploy/systemd/$unit" >"$1/$unit"
    done
}

if [ "${1:-}" = --render ]; then
    render "${2:?usage: install-laptop.sh --render DIR}"
    exit 0
fi

env_file=${XDG_CONFIG_HOME:-$HOME/.config}/librarian/librarian.env
if [ ! -f "$env_file" ]; then
    echo "install-laptop.sh: write $env_file first (deploy/README.md)" >&2
    exit 1
fi
chmod 600 "$env_file"

render "${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
systemctl --user daemon-reload
if ! systemctl --user start librarian-alert@test.service; then
    echo "install-laptop.sh: the test alert failed: journalctl --user -u librarian-alert@test.service" >&2
    exit 1
fi
# One push now, so that a wrong MIRROR_HOST or key shows before the timer hides it.
systemctl --user start librarian-mirror.service
systemctl --user enable --now librarian-mirror.timer
systemctl --user --no-pager list-timers librarian-mirror.timer
