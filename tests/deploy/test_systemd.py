"""deploy/systemd and deploy/launchd: every unit carries the guards the lost-week incident
taught, and works; the laptop's unit runs `librarian push URL --watch` at login, its token only in
the env file.

The incident: a service failed to start after a reboot and nothing said so, for six days.
"""

import os
import plistlib
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from librarian_dagster.cli.main import build_parser
from librarian_dagster.cli.push import cmd_push
from librarian_dagster.cli.run import cmd_up
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "deploy" / "systemd"
AGENT = REPO / "deploy" / "launchd" / "local.librarian.push.plist"
WITH_ENV = REPO / "deploy" / "with-env"
URL = "https://memory.example:3201"
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
    assert {"librarian.service", "librarian-alert@.service", "librarian-push.service"} <= names
    # The rsync of ~/.claude/projects is gone: `librarian push` carries every agent's sessions.
    assert not [n for n in names if "mirror" in n]


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
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"(TELEGRAM_BOT_TOKEN|LIBRARIAN_MCP_TOKEN)\s*=", text)
    assert "lbr_" not in text and "Bearer" not in text


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


def _push_args(command: str):
    program, *args = command.split()
    assert program == "%h/librarian/.venv/bin/librarian"
    return build_parser().parse_args(args)  # flags the real CLI has


def test_the_laptop_pushes_every_agent_from_login():
    unit = parse_unit(SYSTEMD / "librarian-push.service")
    # At login (default.target of the user's manager), not at boot: a laptop's user is there.
    assert one(unit, "Install", "WantedBy") == "default.target"
    args = _push_args(one(unit, "Service", "ExecStart"))
    assert args.handler is cmd_push and args.watch is True
    assert args.url == "@SERVER_URL@"  # the installer writes the server's URL here
    assert one(unit, "Service", "Type") == "simple"


def test_the_launch_agent_runs_what_the_systemd_unit_runs():
    """macOS: the same command from login on, restarted when it fails, its settings from the
    same env file (through with-env, as launchd reads none)."""
    agent = plistlib.loads(AGENT.read_bytes())
    assert agent["Label"] == AGENT.stem
    assert agent["RunAtLoad"] is True
    # Restarted when it exits with an error, as Restart=on-failure; a stop stays a stop.
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["ThrottleInterval"] >= 30
    shell, with_env, env_file, *command = agent["ProgramArguments"]
    assert shell == "/bin/sh" and with_env == "%h/librarian/deploy/with-env"
    unit = parse_unit(SYSTEMD / "librarian-push.service")
    assert [env_file] == unit["Service"]["EnvironmentFile"]
    assert " ".join(command) == one(unit, "Service", "ExecStart")
    # launchd's own PATH lacks Homebrew's, where the git the push asks for a repository may be.
    assert {"/opt/homebrew/bin", "/usr/bin"} <= set(
        agent["EnvironmentVariables"]["PATH"].split(":")
    )
    assert set(agent["EnvironmentVariables"]) == {"PATH"}  # no secret, no setting here


def _installer(name: str, *args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(home or Path.home())}
    return subprocess.run(
        ["bash", str(REPO / "deploy" / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _rendered(tmp_path: Path) -> Path:
    out = tmp_path / "units"
    for installer, args in (("install-server.sh", []), ("install-laptop.sh", [URL])):
        done = _installer(installer, "--render", str(out), *args, home=tmp_path)
        assert done.returncode == 0, done.stderr
    return out


@pytest.mark.process
def test_the_installers_render_every_unit_with_this_checkout(tmp_path):
    out = _rendered(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted([AGENT.name, *(p.name for p in UNITS)])
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "%h/librarian/" not in text and "@SERVER_URL@" not in text
        assert f"{REPO}/deploy/" in text
    push = parse_unit(out / "librarian-push.service")
    program, *args = one(push, "Service", "ExecStart").split()
    assert program == f"{REPO}/.venv/bin/librarian"
    assert build_parser().parse_args(args).url == URL
    # launchd expands no %h: the agent names the home, and the checkout's own with-env.
    agent = plistlib.loads((out / AGENT.name).read_bytes())
    assert "%h" not in (out / AGENT.name).read_text(encoding="utf-8")
    assert agent["ProgramArguments"] == [
        "/bin/sh",
        str(WITH_ENV),
        f"{tmp_path}/.config/librarian/librarian.env",
        f"{REPO}/.venv/bin/librarian",
        "push",
        URL,
        "--watch",
    ]
    assert agent["StandardErrorPath"].startswith(f"{tmp_path}/Library/Logs/")


@pytest.mark.process
@pytest.mark.parametrize(
    "url",
    [
        "https://alice:secret@memory.example:3201",  # a password written into the unit
        "memory.example:3201",  # no scheme: `librarian push` would refuse it at every start
        "https://memory.example/%41",  # systemd would read %4 as its own specifier
        "",
    ],
)
def test_the_laptop_installer_refuses_a_url_it_cannot_write_as_is(tmp_path, url):
    done = _installer("install-laptop.sh", "--render", str(tmp_path / "units"), url, home=tmp_path)
    assert done.returncode != 0
    assert not (tmp_path / "units").exists()


@pytest.mark.process
def test_the_laptop_installer_wants_the_token_in_the_env_file_before_anything(tmp_path):
    done = _installer("install-laptop.sh", URL, home=tmp_path)
    assert done.returncode != 0 and "librarian.env first" in done.stderr
    env_file = tmp_path / ".config" / "librarian" / "librarian.env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("LIBRARIAN_PUSH_EXCLUDE=scratch\n", encoding="utf-8")
    env_file.chmod(0o644)
    done = _installer("install-laptop.sh", URL, home=tmp_path)
    assert done.returncode != 0 and "no LIBRARIAN_MCP_TOKEN" in done.stderr
    assert "librarian token add" in done.stderr
    assert env_file.stat().st_mode & 0o777 == 0o600  # it will hold the token
    assert not (tmp_path / ".config" / "systemd").exists()  # nothing installed


@pytest.mark.process
def test_the_server_installer_stops_until_a_laptop_has_a_token(tmp_path):
    """The recall server takes pushes, and serves beyond 127.0.0.1, only with tokens: without
    one, librarian.service would fail at every start."""
    if not (REPO / ".venv" / "bin" / "librarian").exists():
        pytest.skip("no .venv in this checkout")
    env_file = tmp_path / ".config" / "librarian" / "librarian.env"
    env_file.parent.mkdir(parents=True)
    home = tmp_path / "librarian-home"
    env_file.write_text(f"LIBRARIAN_HOME={home}\nLIBRARIAN_MCP_HOST=0.0.0.0\n", encoding="utf-8")
    done = _installer("install-server.sh", home=tmp_path)
    assert done.returncode != 0, done.stdout
    assert "token add alice-laptop --person alice" in done.stderr
    assert not (tmp_path / ".config" / "systemd").exists()  # nothing installed


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
        assert _alert("librarian-push.service", env).returncode == 0
        assert len(fake.messages) == 3 and "librarian-push.service" in fake.texts[-1]


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


def _with_env(env_file: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(WITH_ENV), str(env_file), *command],
        env={"PATH": os.environ["PATH"], "HOME": "/home/me"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.process
def test_with_env_reads_the_env_file_as_systemd_does_and_expands_nothing(tmp_path):
    """launchd's push gets the settings systemd's gets from the same file: a token with `$`, a
    value with spaces, comments and quotes as systemd's EnvironmentFile= reads them."""
    env_file = tmp_path / "librarian.env"
    env_file.write_text(
        "# the token from `librarian token add alice-laptop --person alice`\n"
        "LIBRARIAN_MCP_TOKEN=lbr_a$HOME`id`b\n"
        "\n"
        "  LIBRARIAN_PUSH_EXCLUDE = scratch,dotfiles\n"
        '; a comment too\nLIBRARIAN_PRIVATE_PROJECTS="diary, taxes"\n'
        "TELEGRAM_CHAT_ID='42'",  # no newline at the end: still read
        encoding="utf-8",
    )
    done = _with_env(env_file, "env")
    assert done.returncode == 0, done.stderr
    got = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert got["LIBRARIAN_MCP_TOKEN"] == "lbr_a$HOME`id`b"
    assert got["LIBRARIAN_PUSH_EXCLUDE"] == "scratch,dotfiles"
    assert got["LIBRARIAN_PRIVATE_PROJECTS"] == "diary, taxes"
    assert got["TELEGRAM_CHAT_ID"] == "42"
    assert got["HOME"] == "/home/me"  # the rest of the environment stays


@pytest.mark.process
def test_with_env_fails_on_a_line_it_cannot_read_without_showing_it(tmp_path):
    env_file = tmp_path / "librarian.env"
    env_file.write_text("LIBRARIAN_MCP_TOKEN lbr_secret\n", encoding="utf-8")
    done = _with_env(env_file, "true")
    assert done.returncode != 0 and "not a NAME=value line" in done.stderr
    assert "lbr_secret" not in done.stderr
    missing = _with_env(tmp_path / "nowhere.env", "true")
    assert missing.returncode != 0 and "nowhere.env" in missing.stderr


@pytest.mark.process
def test_the_shell_scripts_are_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed here (apt-get install shellcheck)")
    scripts = [
        REPO / "deploy" / "install-server.sh",
        REPO / "deploy" / "install-laptop.sh",
        REPO / "deploy" / "lib.sh",
        WITH_ENV,
        SYSTEMD / "librarian-alert",
    ]
    # -x: follow the installers into the lib.sh they source.
    command = ["shellcheck", "-x", *map(str, scripts)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
