#!/usr/bin/env bash
# Install the push on a laptop: `librarian push URL --watch` from login on, a systemd user unit
# on Linux, a launchd agent on macOS, sending every agent's sessions to the server.
#
#   deploy/install-laptop.sh URL               from a checkout of Librarian on the laptop
#   deploy/install-laptop.sh --render DIR URL  only write the units, with this checkout's paths
#                                              and URL, to DIR
#
# Before: ~/.config/librarian/librarian.env with LIBRARIAN_MCP_TOKEN, a token made on the server
# with `librarian token add NAME --person PERSON` (deploy/README.md, docs/team.md).
set -euo pipefail

units=(systemd/librarian-push.service systemd/librarian-alert@.service
    launchd/local.librarian.push.plist)
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

render_to=""
if [ "${1:-}" = --render ]; then
    render_to=${2:?usage: $installer --render DIR URL}
    shift 2
fi
server_url=${1:-}
case $server_url in
http://?* | https://?*) ;;
*) fail "usage: $installer URL (the server's recall address, e.g. https://memory.example:3201)" ;;
esac
# Written into the unit as it is: no user or password in it (the token is the env file's), and
# nothing systemd, sed or XML would read as their own (%, $, &, <).
case $server_url in
*[!A-Za-z0-9._~:/-]*)
    fail "a URL of letters, digits, '.', '_', '~', ':', '/' and '-' only: $server_url"
    ;;
esac
if [ -n "$render_to" ]; then
    render "$render_to" "${units[@]}"
    exit 0
fi

need_env_file
[ -n "$(env_value LIBRARIAN_MCP_TOKEN)" ] ||
    fail "no LIBRARIAN_MCP_TOKEN in $env_file: a token made on the server with" \
        "'librarian token add NAME --person PERSON'"
if [ ! -e "$librarian" ]; then
    # The locked environment, without starting anything (scripts/run would start `librarian up`).
    # shellcheck source=scripts/uv.sh
    (cd "$repo" && source scripts/uv.sh && uv sync --frozen -q)
fi
# One push now, in the foreground: a wrong URL or token shows here (given a session to send),
# not in a log; and a first push of many sessions shows its progress. A session the server
# refuses is said and not sent
# again, so a second run of this installer gets past it.
with_env "$librarian" push "$server_url" ||
    fail "the first push did not finish: mend what it said above, then run this again"

case $(uname -s) in
Linux)
    units_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
    # An earlier install's rsync of ~/.claude/projects: this push replaces it.
    if [ -e "$units_dir/librarian-mirror.timer" ]; then
        systemctl --user disable --now librarian-mirror.timer || true
        rm -f "$units_dir/librarian-mirror.timer" "$units_dir/librarian-mirror.service"
    fi
    install_units systemd/librarian-push.service systemd/librarian-alert@.service
    systemctl --user daemon-reload
    if [ -n "$(env_value TELEGRAM_BOT_TOKEN)" ]; then
        send_test_alert
    else
        echo "$installer: no TELEGRAM_BOT_TOKEN in $env_file: no alert, journalctl only"
    fi
    systemctl --user enable librarian-push.service
    # restart, not start: an earlier install's unit runs with its old URL until then.
    systemctl --user restart librarian-push.service
    systemctl --user --no-pager status librarian-push.service
    ;;
Darwin)
    agents=$HOME/Library/LaunchAgents
    render "$agents" launchd/local.librarian.push.plist
    mkdir -p "$HOME/Library/Logs"
    domain=gui/$(id -u)
    # Out first when an earlier install loaded it, so that the new URL and paths take.
    launchctl bootout "$domain/local.librarian.push" 2>/dev/null || true
    launchctl bootstrap "$domain" "$agents/local.librarian.push.plist"
    echo "pushing from login on; its log: ~/Library/Logs/librarian-push.log"
    ;;
*)
    fail "no login unit for $(uname -s) here: run '$librarian push $server_url --watch' at login"
    ;;
esac
