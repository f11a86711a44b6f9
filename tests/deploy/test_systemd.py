"""deploy/systemd: every unit carries the guards the lost-week incident taught, and works.

The incident: a service failed to start after a reboot and nothing said so, for six days.
"""

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from librarian_dagster.cli.main import build_parser
from librarian_dagster.cli.run import cmd_up
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "deploy" / "systemd"
UNITS = sorted(p for p in SYSTEMD.iterdir() if p.suffix in (".service", ".timer"))
SERVICES = [p for p in UNITS if p.suffix == ".service"]
WATCHED = [p for p in SERVICES if not p.name.startswith("librarian-alert@")]
ALERT = "librarian-alert@%n.service"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections to keys to every value given (systemd allows a key more than once), with
    backslash continuations joined and comments dropped, as systemd reads a unit file."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert current is not None and sep, f"{path.name}: not a key=value line: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    assert not pending, f"{path.name}: ends in a continuation"
    return sections


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}
    for suffix in sorted(units, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * units[suffix]
    return float(value)


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}: {values}"
    return values[0]


def test_the_units_exist():
    names = {p.name for p in UNITS}
    assert {
        "librarian.service",
        "librarian-alert@.service",
        "librarian-mirror.service",
        "librarian-mirror.timer",
    } <= names


@pytest.mark.parametrize("path", WATCHED, ids=lambda p: p.name)
def test_a_failing_unit_reaches_the_failed_state_and_alerts(path):
    unit = parse_unit(path)
    assert one(unit, "Unit", "OnFailure") == ALERT
    assert one(unit, "Service", "Restart") == "on-failure"
    # Restarts must use up the start limit inside its interval: otherwise a unit that can never
    # start restarts forever, never fails, and OnFailure never fires.
    burst = int(one(unit, "Unit", "StartLimitBurst"))
    interval = seconds(one(unit, "Unit", "StartLimitIntervalSec"))
    restart_sec = seconds(one(unit, "Service", "RestartSec"))
    assert burst >= 2 and interval > 0
    assert burst * restart_sec < interval, (burst, restart_sec, interval)


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_what_a_unit_runs_from_the_home_is_executable_at_start(path):
    unit = parse_unit(path)["Service"]
    chmods = [v.split() for v in unit.get("ExecStartPre", [])]
    for key in ("ExecCondition", "ExecStart"):
        for command in unit.get(key, []):
            program = command.split()[0]
            if program == "/bin/sh":
                # A script run through the shell needs no executable bit: it must be in the repo.
                script = command.split()[1]
                assert script.startswith("%h/librarian/"), command
                assert (REPO / script.removeprefix("%h/librarian/")).is_file(), script
            elif program.startswith("%h/"):
                assert ["/bin/chmod", "u+x", program] in chmods, f"{key}={command}"
            else:
                assert program.startswith("/usr/bin/"), f"{key}={command}"


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_settings_come_from_the_env_file_never_from_the_unit(path):
    unit = parse_unit(path)["Service"]
    assert unit["EnvironmentFile"] == ["%h/.config/librarian/librarian.env"]
    assert "Environment" not in unit
    # No secret is written into a unit, which any local user may read.
    assert not re.search(r"TELEGRAM_BOT_TOKEN\s*=", path.read_text(encoding="utf-8"))


def test_the_alert_template_cannot_loop_and_runs_the_script():
    unit = parse_unit(SYSTEMD / "librarian-alert@.service")
    assert "OnFailure" not in unit.get("Unit", {})
    assert one(unit, "Service", "Type") == "oneshot"
    assert one(unit, "Service", "ExecStart").endswith("/librarian-alert %i")


def test_the_server_starts_at_boot_without_a_login():
    unit = parse_unit(SYSTEMD / "librarian.service")
    assert one(unit, "Install", "WantedBy") == "default.target"
    command = one(unit, "Service", "ExecStart").split()
    assert command[0] == "%h/librarian/.venv/bin/librarian"
    args = build_parser().parse_args(command[1:])  # flags the real CLI has
    assert args.handler is cmd_up and args.ui_port == 3000 and not args.no_mcp
    assert one(unit, "Service", "KillMode") == "mixed"
    installer = (REPO / "deploy" / "install-server.sh").read_text(encoding="utf-8")
    assert 'loginctl enable-linger "$USER"' in installer
    assert "systemctl --user enable --now librarian.service" in installer


def test_the_timer_starts_the_mirror_push():
    timer = parse_unit(SYSTEMD / "librarian-mirror.timer")
    assert "Unit" not in timer["Timer"]  # so it starts librarian-mirror.service, same name
    assert seconds(one(timer, "Timer", "OnUnitActiveSec")) <= 15 * 60
    assert one(timer, "Install", "WantedBy") == "timers.target"
    push = one(parse_unit(SYSTEMD / "librarian-mirror.service"), "Service", "ExecStart")
    assert "--delete" not in push  # the mirror keeps what Claude Code cleans up
    assert "BatchMode=yes" in push


def _rendered(tmp_path: Path) -> Path:
    out = tmp_path / "units"
    for installer in ("install-server.sh", "install-laptop.sh"):
        subprocess.run(["bash", str(REPO / "deploy" / installer), "--render", str(out)], check=True)
    return out


@pytest.mark.process
def test_the_installers_render_every_unit_with_this_checkout(tmp_path):
    out = _rendered(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in UNITS)
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "%h/librarian/" not in text
        assert f"{REPO}/deploy/README.md" in text


@pytest.mark.parametrize("name", [p.name for p in UNITS])
@pytest.mark.process
def test_systemd_analyze_verifies_the_rendered_units(tmp_path, name):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here: the units were only parsed")
    out = _rendered(tmp_path)
    path = out / name
    for section in parse_unit(path).values():
        for key in ("ExecStart", "ExecStartPre", "ExecCondition"):
            for command in section.get(key, []):
                program = command.split()[0]
                if program.startswith("/") and not Path(program).exists():
                    pytest.skip(f"{name} runs {program}, which this machine lacks")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    target = out / name.replace("@.", "@test.")  # a template is verified as an instance
    if target != path:
        shutil.copy(path, target)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_UNIT_PATH": f"{out}:"}
    result = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(target)],
        env=env,
        capture_output=True,
        text=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Unknown keys and unparsable values are only warnings to systemd: here they fail.
    assert "Unknown" not in output and "ignoring" not in output.lower(), output


def _alert(unit: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(SYSTEMD / "librarian-alert"), unit],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.process
def test_the_alert_sends_one_telegram_message_naming_the_unit():
    with fake_telegram() as fake:
        env = {
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_CHAT_ID": CHAT_ID,
            "LIBRARIAN_TELEGRAM_BASE_URL": fake.url,
        }
        result = _alert("librarian.service", env)
        assert result.returncode == 0, result.stderr
        assert len(fake.messages) == 1
        message = fake.messages[0]
        assert message["chat_id"] == CHAT_ID
        assert "librarian.service failed on " + socket.gethostname() in message["text"]
        assert "journalctl --user -u librarian.service" in message["text"]
        assert TOKEN not in message["text"]

        assert _alert("test", env).returncode == 0
        assert "reach this chat" in fake.texts[-1]

        # A Telegram hiccup (a 503) is tried again, and the message still arrives once.
        fake.fail_with, fake.failures = 503, 1
        assert _alert("librarian-mirror.service", env).returncode == 0
        assert len(fake.messages) == 3 and "librarian-mirror.service" in fake.texts[-1]


@pytest.mark.process
def test_an_alert_that_cannot_be_sent_fails_its_unit():
    with fake_telegram() as fake:
        wrong = {
            "TELEGRAM_BOT_TOKEN": "1:wrong",
            "TELEGRAM_CHAT_ID": CHAT_ID,
            "LIBRARIAN_TELEGRAM_BASE_URL": fake.url,
        }
        result = _alert("librarian.service", wrong)
        assert result.returncode != 0
        assert fake.messages == []
        assert "1:wrong" not in result.stderr  # curl's error does not print the URL

        missing = {"TELEGRAM_BOT_TOKEN": TOKEN, "LIBRARIAN_TELEGRAM_BASE_URL": fake.url}
        result = _alert("librarian.service", missing)
        assert result.returncode != 0 and "TELEGRAM_CHAT_ID" in result.stderr
        # A refused token is not tried again (only timeouts, 429 and 5xx are), and a missing
        # chat sends nothing at all.
        assert fake.calls == 1


def _reachable(host: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(SYSTEMD / "librarian-mirror-reachable")],
        env={"PATH": os.environ["PATH"], "MIRROR_HOST": host},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_the_push_is_skipped_away_from_the_server_and_fails_when_broken():
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client here: the reachability check resolves hosts through ssh -G")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert _reachable(f"ssh://127.0.0.1:{port}").returncode == 0
    # Closed now: away from the server is a skip (1..254), not a failure.
    assert _reachable(f"ssh://127.0.0.1:{port}").returncode == 1
    # No server named is a broken setup: 255 fails the unit, and so alerts.
    unset = _reachable("")
    assert unset.returncode == 255 and "MIRROR_HOST" in unset.stderr


@pytest.mark.process
def test_the_push_keeps_what_the_laptop_deleted_and_keeps_it_private(tmp_path):
    """The unit's own rsync arguments, run locally (no ssh): a second push after Claude Code
    removed a transcript leaves the mirror's copy, and the mirror is readable by its owner only."""
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed here")
    push = one(parse_unit(SYSTEMD / "librarian-mirror.service"), "Service", "ExecStart")
    args = push.split()
    options = [a for a in args[1:] if a.startswith("--")]
    source = tmp_path / "home" / ".claude" / "projects"
    (source / "-home-me-proj").mkdir(parents=True)
    (source / "-home-me-proj" / "a.jsonl").write_text('{"type":"user"}\n', encoding="utf-8")
    (source / "-home-me-proj" / "b.jsonl").write_text('{"type":"user"}\n', encoding="utf-8")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    command = ["rsync", *options, f"{source}/", f"{mirror}/"]
    subprocess.run(command, check=True)
    (source / "-home-me-proj" / "a.jsonl").unlink()
    subprocess.run(command, check=True)
    copied = mirror / "-home-me-proj"
    assert sorted(p.name for p in copied.iterdir()) == ["a.jsonl", "b.jsonl"]
    assert (copied / "b.jsonl").stat().st_mode & 0o777 == 0o600
    assert copied.stat().st_mode & 0o777 == 0o700


@pytest.mark.process
def test_the_shell_scripts_are_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed here (apt-get install shellcheck)")
    scripts = [
        REPO / "deploy" / "install-server.sh",
        REPO / "deploy" / "install-laptop.sh",
        REPO / "deploy" / "lib.sh",
        SYSTEMD / "librarian-alert",
        SYSTEMD / "librarian-mirror-reachable",
    ]
    # -x: follow the installers into the lib.sh they source.
    command = ["shellcheck", "-x", *map(str, scripts)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
