#!/usr/bin/env bash
# Install Librarian's user units on this server, keep them running without a login, start them.
#
#   deploy/install-server.sh              as the user Librarian runs as, from its checkout
#   deploy/install-server.sh --render DIR only write the units, with this checkout's paths, to DIR
#
# Before: `bash scripts/run` once (it makes .venv; Ctrl-C when it is up),
# ~/.config/librarian/librarian.env written, and a token for each laptop (deploy/README.md).
set -euo pipefail

units=(systemd/librarian.service systemd/librarian-alert@.service)
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
render_if_asked "$@"

if [ ! -e "$librarian" ]; then
    fail "no $repo/.venv yet: run 'bash scripts/run' once first"
fi
need_env_file
# Laptops push with their person's token, and the recall server takes a push (or serves beyond
# 127.0.0.1) only with tokens: without one, `librarian up` would fail at every start, and alert.
if [ -z "$(env_value LIBRARIAN_MCP_TOKEN)" ]; then
    listed=$(with_env "$librarian" token list) || fail "'librarian token list' failed: see above"
    case $listed in
    "no tokens in"*)
        fail "make a token for each laptop first: $librarian token add alice-laptop --person alice"
        ;;
    esac
fi
case $(env_value LIBRARIAN_MCP_HOST) in
'' | 127.0.0.1 | localhost | ::1)
    echo "$installer: LIBRARIAN_MCP_HOST is 127.0.0.1: laptops reach it only through a proxy"
    ;;
esac
# The capture-gap check alerts when Claude Code's folder here is missing: on a server that
# receives pushes it may stay empty, but it must exist.
mirror=$(env_value LIBRARIAN_MIRROR)
mkdir -p "${mirror:-$HOME/.claude/projects}"
install_units "${units[@]}"
# Without lingering, user units start at the user's first login, not at boot.
loginctl enable-linger "$USER"
systemctl --user daemon-reload
send_test_alert
systemctl --user enable --now librarian.service
systemctl --user --no-pager status librarian.service
