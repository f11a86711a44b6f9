#!/usr/bin/env bash
# Install the mirror push on the laptop: every five minutes, ~/.claude/projects goes to the server.
#
#   deploy/install-laptop.sh              from a checkout of Librarian on the laptop
#   deploy/install-laptop.sh --render DIR only write the units, with this checkout's paths, to DIR
#
# Before: an ssh key the server accepts (BatchMode: no prompt) and
# ~/.config/librarian/librarian.env with MIRROR_HOST, MIRROR_PATH and TELEGRAM_* (deploy/README.md).
set -euo pipefail

units=(librarian-mirror.service librarian-mirror.timer librarian-alert@.service)
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
render_if_asked "$@"

need_env_file
install_units
systemctl --user daemon-reload
send_test_alert
# One push now, so that a wrong MIRROR_HOST or key shows before the timer hides it.
systemctl --user start librarian-mirror.service
systemctl --user enable --now librarian-mirror.timer
systemctl --user --no-pager list-timers librarian-mirror.timer
