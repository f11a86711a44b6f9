"""The notifier against a fake Bot API on 127.0.0.1: delivery, retries, outages, no leaks."""

import logging
import socket

import pytest

from librarian_dagster.core.service.telegram import RETRIES, Notifier
from librarian_dagster.core.settings import Settings, SettingsError
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ATTEMPTS = RETRIES.attempts


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.slept: list[float] = []

    def notifier(self, base_url: str, token: str | None = TOKEN, chat_id: str | None = CHAT_ID):
        return Notifier(
            base_url,
            token,
            chat_id,
            log_info=lambda m: self.lines.append(("info", m)),
            log_warning=lambda m: self.lines.append(("warning", m)),
            sleep=self.slept.append,
        )

    def text(self) -> str:
        return "\n".join(m for _, m in self.lines)


def test_a_message_reaches_the_chat_through_the_bot_api():
    log = Log()
    with fake_telegram() as fake:
        assert log.notifier(fake.url).send("Run failed: ingest_session")
    assert fake.messages == [{"chat_id": CHAT_ID, "text": "Run failed: ingest_session"}]
    assert log.lines == [("info", "alert sent to Telegram: Run failed: ingest_session")]


def test_without_telegram_settings_the_alert_goes_to_the_log():
    log = Log()
    with fake_telegram() as fake:
        # The log is the destination then: delivered, so a gap alert is not repeated each tick.
        assert log.notifier(fake.url, token=None).send("gap: 3 sessions")
        assert log.notifier(fake.url, chat_id=None).send("gap: 3 sessions")
    assert fake.calls == 0
    assert (
        log.lines == [("warning", "alert (Telegram not configured, log only): gap: 3 sessions")] * 2
    )


def test_a_500_is_retried_a_bounded_number_of_times_then_logged():
    log = Log()
    with fake_telegram() as fake:
        fake.fail_with = 500
        notifier = log.notifier(fake.url)
        assert not notifier.send("first")
        assert fake.calls == ATTEMPTS
        # The outage is known now: the next alert of this tick is logged without more waiting.
        assert not notifier.send("second")
        assert fake.calls == ATTEMPTS
    assert (
        "alert not sent to Telegram (gave up after 3 tries; last: HTTP 500: Internal Server "
        "Error): first" in log.text()
    )
    # Between tries, exponentially from half a second, jittered.
    assert len(log.slept) == ATTEMPTS - 1 and 0.4 <= log.slept[0] <= 0.6 <= log.slept[1] <= 1.2
    assert "alert not sent (Telegram failed earlier in this tick): second" in log.text()
    assert fake.messages == []


def test_a_blip_is_ridden_out():
    log = Log()
    with fake_telegram() as fake:
        fake.fail_with, fake.failures = 500, 1
        assert log.notifier(fake.url).send("after one 500")
        fake.fail_with, fake.failures = 429, 1
        assert log.notifier(fake.url).send("after one 429")
    assert fake.texts == ["after one 500", "after one 429"]
    assert fake.calls == 4
    assert log.slept[1] == 1.0  # the 429's wait is the one Telegram asked for (retry_after)


def test_a_server_that_is_down_costs_no_exception():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    log = Log()
    assert not log.notifier(f"http://127.0.0.1:{port}").send("nobody hears this")
    assert (
        "alert not sent to Telegram (gave up after 3 tries; last: ConnectError): nobody hears"
        in log.text()
    )


def test_a_wrong_token_is_not_retried_and_never_logged(caplog):
    log = Log()
    wrong = "987654321:AAWrongTokenWrongTokenWrongToken_xyz"
    with caplog.at_level(logging.DEBUG), fake_telegram() as fake:
        assert not log.notifier(fake.url, token=wrong).send("hello")
        assert log.notifier(fake.url).send("hello again")
    assert fake.calls == 2  # a 401 does not heal by retrying
    assert "HTTP 401: Unauthorized" in log.text()
    everything = log.text() + "\n".join(r.getMessage() for r in caplog.records)
    assert "sendMessage" in everything  # httpx did log its requests ...
    assert wrong not in everything and TOKEN not in everything  # ... without the token


def test_secrets_are_redacted_before_they_leave():
    log = Log()
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with fake_telegram() as fake:
        assert log.notifier(fake.url).send(f"step failed: bad credentials {secret}")
    [text] = fake.texts
    assert secret not in text and "[REDACTED:" in text
    assert secret not in log.text()


def test_the_alert_settings(tmp_path):
    home = {"LIBRARIAN_HOME": str(tmp_path)}
    default = Settings.from_env(home)
    assert (default.telegram_bot_token, default.telegram_chat_id) == (None, None)
    assert not default.telegram_configured
    assert default.telegram_base_url == "https://api.telegram.org"
    assert default.notify_digests is True
    assert (default.gap_minutes, default.quiet_hours) == (60.0, 24.0)
    assert default.ui_url == "http://127.0.0.1:3000"
    custom = Settings.from_env(
        {
            **home,
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_CHAT_ID": CHAT_ID,
            "LIBRARIAN_TELEGRAM_BASE_URL": "http://127.0.0.1:9/",
            "LIBRARIAN_NOTIFY_DIGESTS": "false",
            "LIBRARIAN_GAP_MINUTES": "15",
            "LIBRARIAN_QUIET_HOURS": "0",
            "LIBRARIAN_UI_URL": "https://dagster.example.org/",
        }
    )
    assert custom.telegram_configured and custom.telegram_bot_token == TOKEN
    assert TOKEN not in repr(custom)
    assert custom.telegram_base_url == "http://127.0.0.1:9"
    assert custom.notify_digests is False
    assert (custom.gap_minutes, custom.quiet_hours) == (15.0, 0.0)
    assert custom.ui_url == "https://dagster.example.org"
    with pytest.raises(SettingsError, match="LIBRARIAN_UI_URL must be an http"):
        Settings.from_env({**home, "LIBRARIAN_UI_URL": "localhost:3000"})
    with pytest.raises(SettingsError, match="LIBRARIAN_GAP_MINUTES must be a number"):
        Settings.from_env({**home, "LIBRARIAN_GAP_MINUTES": "an hour"})
