// What Librarian's plugins for other agents share (plugins/<agent>/): what the recall server
// remembers, asked through the Python hooks' own transport (hooks/plugin_ask.py, run as every
// hook is, by hooks/run-hook.sh), which keeps the deadlines, the breaker of a server that hangs,
// once per file per session and git's files, and logs; the server writes the text
// (core/recall/hook_text.py). Here: the event in Claude Code's shape, and the text handed on.
//
// - recallContext: the past sessions that bear on a prompt.
// - fileHistory: the history of the first file a file tool's call touched that the session was
//   not told of yet.
//
// Fails open: no Python, a hook that fails, an answer that is not one gives no text, and nothing
// here throws. The text is untrusted: over MAX_CONTEXT_CHARS it is dropped. Plain JavaScript and
// node: modules: runs in Bun (OpenCode) and Node (Pi), with nothing to install.

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
// The hook ends at its own deadline; this bounds a process that never got as far as keeping it
// (a Python that cannot start), above the longest deadline a hook takes (5 s, twice for history).
const KILL_AFTER_MS = 15000

// The session's latest prompt: the file history's task at hand, since these agents keep no
// transcript file the server could read it from. Kept as long as the agent's process.
const tasks = new Map()

export function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value)
}

// The working folder an agent names, when it is one.
export function workingDir(directory) {
  return typeof directory === "string" && path.isAbsolute(directory) ? directory : null
}

// Where a plugin's own failures go (the hook logs every ask itself): LIBRARIAN_LOG, else
// $XDG_STATE_HOME/librarian/AGENT.log, as the hooks of every agent but Claude Code.
function logFailure(agent, what, outcome, env) {
  try {
    const state = env.XDG_STATE_HOME || path.join(homedir(), ".local", "state")
    const file = env.LIBRARIAN_LOG || path.join(state, "librarian", `${agent}.log`)
    mkdirSync(path.dirname(file), { recursive: true })
    const stamp = new Date().toISOString().replace(/\.\d+Z$/, "Z")
    appendFileSync(file, `${stamp} plugin ${what} ${outcome}\n`)
  } catch {}
}

// The hook's text for `event`, or null; never throws. `server`: the one the agent's configuration
// names (`librarian connect AGENT --server URL`), asked in place of LIBRARIAN_MCP_URL.
function ask(agent, what, event, env, server) {
  const args = [RUN_HOOK, ...(typeof server === "string" && /^https?:\/\//.test(server) ? [`--server=${server}`] : [])]
  return new Promise((resolve) => {
    const failed = (why) => {
      logFailure(agent, what, why, env)
      resolve(null)
    }
    let child
    try {
      child = spawn("sh", [...args, "plugin_ask.py", agent, what], { env, stdio: ["pipe", "pipe", "ignore"], windowsHide: true })
    } catch (error) {
      return failed(`failed (${error?.code || "spawn"})`)
    }
    const chunks = []
    let size = 0
    const timer = setTimeout(() => child.kill("SIGKILL"), KILL_AFTER_MS)
    child.stdout.on("data", (chunk) => {
      size += chunk.length
      if (size <= MAX_OUTPUT_BYTES) chunks.push(chunk)
    })
    child.on("error", (error) => {
      clearTimeout(timer)
      failed(`failed (${error?.code || "spawn"})`)
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      if (signal) return failed(`failed (${signal})`)
      if (!size) return resolve(null) // nothing to add, as the hook's own log says
      try {
        const text = JSON.parse(Buffer.concat(chunks).toString("utf8"))?.context
        if (typeof text === "string" && text && text.length <= MAX_CONTEXT_CHARS) return resolve(text)
      } catch {}
      failed("failed (not a context)")
    })
    child.stdin.on("error", () => {})
    child.stdin.end(JSON.stringify(event))
  })
}

function cwdOf(event, cwd) {
  return cwd ? { ...event, cwd } : event
}

// The past sessions that bear on `prompt`, or null. The prompt is kept as the session's task.
export async function recallContext(agent, prompt, sessionID, cwd, env, server) {
  if (typeof prompt !== "string") return null
  const words = prompt.trim().split(/\s+/).filter(Boolean)
  if (sessionID && words.length && !(words.length === 1 && words[0].startsWith("/"))) {
    if (!tasks.has(sessionID) && tasks.size >= MAX_SESSIONS_KEPT) tasks.delete(tasks.keys().next().value)
    tasks.set(sessionID, Array.from(prompt).slice(0, MAX_TASK_CHARS).join(""))
  }
  const event = { hook_event_name: "UserPromptSubmit", prompt, session_id: sessionID }
  return ask(agent, "recall", cwdOf(event, cwd), env, server)
}

// The history of the first file `tool`'s call touches that the session was not told of yet.
export async function fileHistory(agent, tool, args, sessionID, cwd, env, server) {
  const event = { hook_event_name: "PreToolUse", tool_name: tool, tool_input: isObject(args) ? args : {}, session_id: sessionID }
  const task = sessionID ? tasks.get(sessionID) : undefined
  return ask(agent, "history", cwdOf(task ? { ...event, task } : event, cwd), env, server)
}
