#!/usr/bin/env bash
# Install Librarian's user units on this server, keep them running without a login, start them.
#
#   deploy/install-server.sh              as the user Librarian runs as, from its checkout
#   deploy/install-server.sh --render DIR only write the units, with this checkout's paths, to DIR
#
# Before: `bash scripts/run` once (it makes .venv; Ctrl-C when it is up) and
# ~/.config/librarian/librarian.env written (deploy/README.md).
set -euo pipefail

units=(librarian.service librarian-alert@.service)
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
render_if_asked "$@"

if [ ! -e "$repo/.venv/bin/librarian" ]; then
    fail "no $repo/.venv yet: run 'bash scripts/run' once first"
fi
need_env_file
install_units
# Without lingering, user units start at the user's first login, not at boot.
loginctl enable-linger "$USER"
systemctl --user daemon-reload
send_test_alert
systemctl --user enable --now librarian.service
systemctl --user --no-pager status librarian.service
