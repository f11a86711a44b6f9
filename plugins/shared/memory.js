// What Librarian's plugins share (plugins/<agent>/): the recall server's text, asked through the
// hooks' one transport (hooks/plugin_ask.py, run as every hook is), which keeps the deadlines, the
// breaker, once per file per session and git, and logs. Here: the event in Claude Code's shape,
// and the text handed on (untrusted: dropped over MAX_CONTEXT_CHARS). Fails open, never throws.
// Plain JavaScript: Bun (OpenCode) and Node (Pi).

import { spawn } from "node:child_process"
import { appendFileSync, mkdirSync } from "node:fs"
import { homedir } from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"

const RUN_HOOK = fileURLToPath(new URL("../../hooks/run-hook.sh", import.meta.url))
const MAX_OUTPUT_BYTES = 1024 * 1024
const MAX_CONTEXT_CHARS = 10000
const MAX_TASK_CHARS = 2000
const MAX_SESSIONS_KEPT = 500
// The hook ends at its own deadline; this bounds one that never started keeping it.
const KILL_AFTER_MS = 15000

// Each session's latest prompt: the file history's task, as these agents keep no transcript
// file the server could read it from. Kept as long as the agent's process.
const tasks = new Map()

export function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value)
}

export function workingDir(directory) {
  return typeof directory === "string" && path.isAbsolute(directory) ? directory : null
}

// The plugin's own failures (the hook logs each ask): LIBRARIAN_LOG, else the agent's own log,
// $XDG_STATE_HOME/librarian/AGENT.log, as the hooks of every agent but Claude Code.
function logFailure(agent, what, outcome, env) {
  try {
    const file = env.LIBRARIAN_LOG || path.join(env.XDG_STATE_HOME || path.join(homedir(), ".local", "state"), "librarian", `${agent}.log`)
    mkdirSync(path.dirname(file), { recursive: true })
    appendFileSync(file, `${new Date().toISOString().replace(/\.\d+Z$/, "Z")} plugin ${what} ${outcome}\n`)
  } catch {}
}

// The hook's text for `event`, or null. `server`: the one the agent's configuration names
// (`librarian connect AGENT --server URL`), asked in place of LIBRARIAN_MCP_URL.
function ask(agent, what, event, env, server) {
  const named = typeof server === "string" && /^https?:\/\//.test(server) ? [`--server=${server}`] : []
  return new Promise((resolve) => {
    const failed = (why) => {
      logFailure(agent, what, `failed (${why})`, env)
      resolve(null)
    }
    let child
    try {
      child = spawn("sh", [RUN_HOOK, ...named, "plugin_ask.py", agent, what], { env, stdio: ["pipe", "pipe", "ignore"] })
    } catch (error) {
      return failed(error?.code || "spawn")
    }
    const chunks = []
    let size = 0
    const timer = setTimeout(() => child.kill("SIGKILL"), KILL_AFTER_MS)
    child.stdout.on("data", (chunk) => (size += chunk.length) <= MAX_OUTPUT_BYTES && chunks.push(chunk))
    child.on("error", (error) => failed(error?.code || "spawn"))
    child.on("close", (_, signal) => {
      clearTimeout(timer)
      if (signal) return failed(signal)
      if (!size) return resolve(null) // nothing to add, as the hook's own log says
      try {
        const text = JSON.parse(Buffer.concat(chunks).toString("utf8"))?.context
        if (typeof text === "string" && text && text.length <= MAX_CONTEXT_CHARS) return resolve(text)
      } catch {}
      failed("not a context")
    })
    child.stdin.on("error", () => {})
    child.stdin.end(JSON.stringify(event))
  })
}

// The past sessions that bear on `prompt`, or null; the prompt is kept as the session's task
// (a bare command, `/exit`, says nothing of the work).
export async function recallContext(agent, prompt, sessionID, cwd, env, server) {
  if (typeof prompt !== "string") return null
  const words = prompt.trim().split(/\s+/).filter(Boolean)
  if (sessionID && words.length && !(words.length === 1 && words[0].startsWith("/"))) {
    if (!tasks.has(sessionID) && tasks.size >= MAX_SESSIONS_KEPT) tasks.delete(tasks.keys().next().value)
    tasks.set(sessionID, Array.from(prompt).slice(0, MAX_TASK_CHARS).join(""))
  }
  return ask(agent, "recall", { hook_event_name: "UserPromptSubmit", prompt, session_id: sessionID, cwd }, env, server)
}

// The history of the first file `tool`'s call touches that the session was not told of yet.
export async function fileHistory(agent, tool, args, sessionID, cwd, env, server) {
  const task = sessionID ? tasks.get(sessionID) : undefined
  const event = { hook_event_name: "PreToolUse", tool_name: tool, tool_input: isObject(args) ? args : {}, session_id: sessionID, task, cwd }
  return ask(agent, "history", event, env, server)
}
