// What Librarian's plugins for other agents share (plugins/<agent>/): ask the recall server
// what it remembers, within the Python hooks' deadlines, and hand on the text it writes
// (core/recall/hook_text.py), as hooks/librarian_memory.py does.
//
// - recallContext(prompt, cwd): `POST /recall` within LIBRARIAN_RECALL_TIMEOUT_MS (800 ms), with
//   the prompt's cwd and git branch.
// - fileHistory(agent, tool, args, sessionID, cwd): `POST /touches` (which files the call
//   touches, by the server's reader of `agent`), then `POST /history` for the first file not
//   seen yet in the session, each within LIBRARIAN_HISTORY_TIMEOUT_MS (300 ms).
//
// Fails open: a server that is down, slow or wrong gives no text, and nothing here throws. A
// server that missed a deadline is left alone for 30 s, longer while it keeps missing them. The
// server's text is untrusted: at most MAX_CONTEXT_CHARS, else dropped. LIBRARIAN_RECALL=off turns
// both off, LIBRARIAN_HISTORY=off the file history; LIBRARIAN_MCP_URL (or LIBRARIAN_RECALL_URL)
// says where the server is, unless the agent's configuration names one (withServer), and
// LIBRARIAN_MCP_TOKEN goes as a Bearer token.
//
// Plain JavaScript, the runtime's own fetch and node: modules: nothing to install. Runs in Bun
// (OpenCode) and Node (Pi).

import { appendFileSync, closeSync, constants, fstatSync, mkdirSync, openSync, readSync, renameSync, statSync } from "node:fs"
import { homedir } from "node:os"
import path from "node:path"

const DEFAULT_URL = "http://127.0.0.1:3201/recall"
const RECALL_TIMEOUT_MS = 800
const HISTORY_TIMEOUT_MS = 300
const LIMIT = 3
const MAX_QUERY_CHARS = 2000
const MAX_TASK_CHARS = 2000
const MAX_RESPONSE_BYTES = 1024 * 1024
const MAX_CONTEXT_CHARS = 10000
const MAX_PATH_CHARS = 4096
const MAX_GIT_WALK = 64
const MAX_GIT_READ = 4200
const MAX_TOOL_TEXT = 8000
const MAX_TOUCHED = 20
const LIBRARY_DIRNAME = "_memory_library"
const MAX_SESSIONS_KEPT = 500
const LOG_MAX_BYTES = 256 * 1024
const OFF = ["off", "0", "false", "no"]
const SEEN = "history seen"

class Failed extends Error {}

function intEnv(env, name, fallback, low = 50, high = 5000) {
  const raw = env[name]
  const value = raw === undefined || raw === "" ? fallback : Number(raw)
  return Math.max(low, Math.min(high, Number.isInteger(value) ? value : fallback))
}

function isOff(...values) {
  return values.some((value) => OFF.includes(String(value ?? "").trim().toLowerCase()))
}

function withBudget(env, name, body) {
  const value = Number(env[name])
  if (env[name] && Number.isInteger(value)) body.budget = value
  return body
}

// `/<name>` beside LIBRARIAN_RECALL_URL's `/recall`, else beside the MCP URL's `/mcp`.
function urlOf(env, name) {
  const mcp = (env.LIBRARIAN_MCP_URL || "").replace(/\/+$/, "")
  let url = env.LIBRARIAN_RECALL_URL || (mcp ? mcp.replace(/\/mcp$/, "") + "/recall" : DEFAULT_URL)
  url = url.replace(/\/+$/, "")
  return (url.endsWith("/recall") ? url.slice(0, -"/recall".length) : url) + "/" + name
}

function sendable(text, limit) {
  if (typeof text !== "string" || !text || text.length > limit || text.includes("\0")) return false
  return text.isWellFormed ? text.isWellFormed() : !/[\ud800-\udfff]/.test(text)
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value)
}

// -- the request --------------------------------------------------------------------------------

// A server that hangs costs every call its whole deadline; one that is down refuses at once. So
// one that missed a deadline is left alone for a window that doubles with each miss in a row (30 s
// up to 10 min), as librarian_hooklib.left_alone_s does; after it, one call asks again.
const hangs = { count: 0, last: 0 }

function hungLately() {
  if (hangs.count <= 0) return false
  return Date.now() - hangs.last < Math.min(30000 * 2 ** Math.min(hangs.count - 1, 10), 600000)
}

async function readBounded(response) {
  const chunks = []
  let size = 0
  const reader = response.body?.getReader()
  for (;;) {
    const { done, value } = reader ? await reader.read() : { done: true }
    if (done) break
    size += value.byteLength
    if (size > MAX_RESPONSE_BYTES) {
      reader.cancel().catch(() => {})
      throw new Failed("answer too large")
    }
    chunks.push(value)
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(chunks))
}

// One POST within `ms`; the answer as an object. Throws Failed, whose message is safe to log
// (never the prompt nor the token): a code (ECONNREFUSED) or a class, since a message can carry
// addresses. One connection a request, as the Python hooks' (`Connection: close`).
async function post(env, name, body, ms) {
  const signal = AbortSignal.timeout(ms)
  const headers = { "Content-Type": "application/json", Accept: "application/json", Connection: "close" }
  if (env.LIBRARIAN_MCP_TOKEN) headers.Authorization = "Bearer " + env.LIBRARIAN_MCP_TOKEN
  let timer
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failed("timeout")), ms + 20)
  })
  const ask = async () => {
    const url = urlOf(env, name)
    if (!/^https?:\/\/[^/]/.test(url)) throw new Failed("bad url")
    const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body), signal, redirect: "error", keepalive: false })
    const data = await readBounded(response)
    if (response.status === 401 || response.status === 403) throw new Failed(`refused (${response.status})`)
    if (response.status !== 200) throw new Failed(`http ${response.status}`)
    let answer
    try {
      answer = JSON.parse(data)
    } catch {
      throw new Failed("answer is not JSON")
    }
    if (!isObject(answer)) throw new Failed("answer is not an object")
    return answer
  }
  try {
    const answer = await Promise.race([ask(), late])
    hangs.count = 0
    return answer
  } catch (error) {
    const why = signal.aborted ? "timeout" : error instanceof Failed ? error.message : String(error?.code || error?.name || "error").slice(0, 40)
    if (why === "timeout") {
      hangs.count += 1
      hangs.last = Date.now()
    } else hangs.count = 0
    throw new Failed(why)
  } finally {
    clearTimeout(timer)
  }
}

// [text, outcome] of an answer: the server's text for the agent, and what it says of it.
function told(answer, what) {
  const { context, note, sessions } = answer
  if (context !== null && context !== undefined && (typeof context !== "string" || context.length > MAX_CONTEXT_CHARS))
    return [null, `${what} not a context`]
  if (context) return [context, `${what} added ${sessions} sessions, ${context.length} chars`]
  return [null, `${what} none${typeof note === "string" ? ` (${note.slice(0, 200)})` : ""}`]
}

// -- where the question comes from: git's files, read as git reads them -------------------------

// The first MAX_GIT_READ bytes of a regular file as text; null for anything else (a FIFO named
// HEAD must not hang the agent: it is opened without blocking and checked before it is read).
function readStart(file) {
  let fd
  try {
    fd = openSync(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0) | (constants.O_NOCTTY ?? 0))
    if (!fstatSync(fd).isFile()) return null
    const buffer = Buffer.alloc(MAX_GIT_READ)
    return new TextDecoder("utf-8", { fatal: true }).decode(buffer.subarray(0, readSync(fd, buffer, 0, MAX_GIT_READ, 0)))
  } catch {
    return null
  } finally {
    if (fd !== undefined) closeSync(fd)
  }
}

// The first `.git` at or above `cwd`, as git finds it: [folder, its path, whether a folder].
function dotgit(cwd) {
  let folder = path.resolve(cwd)
  for (let i = 0; i < MAX_GIT_WALK; i++) {
    const found = path.join(folder, ".git")
    try {
      return [folder, found, statSync(found).isDirectory()]
    } catch {}
    if (path.dirname(folder) === folder) return null
    folder = path.dirname(folder)
  }
  return null
}

// The git folder of the repository holding `cwd`: `.git`, or for a worktree or submodule the
// folder its `gitdir: <path>` file names (relative to the folder holding it).
function gitDir(cwd) {
  const found = dotgit(cwd)
  if (!found) return null
  const [folder, git, isFolder] = found
  if (isFolder) return git
  const line = (readStart(git) || "").split(/\r?\n/)[0]
  const gitdir = line.replace(/^gitdir:/, "").trim()
  if (!line.startsWith("gitdir:") || !gitdir || gitdir.includes("\0")) return null
  return path.resolve(folder, gitdir)
}

function gitBranch(cwd) {
  const gitdir = gitDir(cwd)
  const line = ((gitdir && readStart(path.join(gitdir, "HEAD"))) || "").split(/\r?\n/)[0].trim()
  const name = line.startsWith("ref: refs/heads/") ? line.slice("ref: refs/heads/".length) : ""
  return sendable(name, 200) && !/[\s\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}]/u.test(name) ? name : null
}

// The `origin` remote (else the first) of the repository holding `cwd`, from its git config (a
// worktree's is the main repository's), without a user or password: with a file's history
// question it tells the server a teammate's checkout of it in a folder named otherwise.
function gitRemote(cwd) {
  let gitdir = gitDir(cwd)
  if (!gitdir) return null
  const common = (readStart(path.join(gitdir, "commondir")) || "").trim()
  if (common && !common.includes("\0")) gitdir = path.resolve(gitdir, common)
  const urls = new Map()
  let section = ""
  for (const raw of (readStart(path.join(gitdir, "config")) || "").split(/\r?\n/)) {
    const line = raw.trim()
    if (line.startsWith("[")) section = line
    else if (section.startsWith("[remote ") && line.split("=")[0].trim() === "url" && !urls.has(section))
      urls.set(section, line.slice(line.indexOf("=") + 1).trim())
  }
  const url = urls.get('[remote "origin"]') || urls.values().next().value
  if (!url || !sendable(url, 400)) return null
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, "$1")
}

// -- recall and file history ---------------------------------------------------------------------

// [text, outcome] for a prompt: the past sessions that bear on it. Never throws.
export async function recallContext(prompt, cwd, env) {
  if (isOff(env.LIBRARIAN_RECALL)) return [null, "recall off"]
  if (typeof prompt !== "string" || !prompt.trim()) return [null, "recall skipped (no prompt)"]
  if (hungLately()) return [null, "recall skipped (server hung lately)"]
  const timeout = intEnv(env, "LIBRARIAN_RECALL_TIMEOUT_MS", RECALL_TIMEOUT_MS)
  const body = withBudget(env, "LIBRARIAN_RECALL_BUDGET", {
    query: Array.from(prompt).slice(0, MAX_QUERY_CHARS).join(""),
    limit: LIMIT,
    deadline_ms: timeout,
  })
  try {
    if (sendable(cwd, MAX_PATH_CHARS) && path.isAbsolute(cwd)) {
      body.cwd = cwd
      const branch = gitBranch(cwd)
      if (branch) body.git_branch = branch
    }
    return told(await post(env, "recall", body, timeout), "recall")
  } catch (error) {
    return [null, `recall failed (${error instanceof Failed ? error.message : error?.name || "error"})`]
  }
}

// [action, files] of a tool call, as the server's reader of `agent` says; relative paths are
// joined to the directory.
async function touched(agent, tool, args, cwd, env) {
  const toolInput = {}
  for (const [key, value] of Object.entries(isObject(args) ? args : {}))
    toolInput[key] = typeof value === "string" ? value.slice(0, MAX_TOOL_TEXT) : value
  const body = { agent, tool_name: tool.slice(0, 200), tool_input: toolInput }
  if (cwd) body.cwd = cwd
  let answer
  try {
    answer = await post(env, "touches", body, intEnv(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", HISTORY_TIMEOUT_MS))
  } catch (error) {
    return [[], `touches failed (${error instanceof Failed ? error.message : "error"})`]
  }
  const { action, paths } = answer
  if (typeof action !== "string" || !Array.isArray(paths)) return [[], "touches failed (no paths)"]
  const files = paths
    .slice(0, MAX_TOUCHED)
    .filter((p) => sendable(p, MAX_PATH_CHARS))
    .map((p) => path.normalize(path.resolve(cwd || process.cwd(), p)))
  return [files, `${action || "nothing"} of ${files.length} files`]
}

// What a session was told of already (a file's history once per session) and asked last (its
// task): kept as long as the module lives, which is as long as the agent's process.
const seen = new Map()
const tasks = new Map()

function remembered(map, key, make) {
  if (!map.has(key)) {
    if (map.size >= MAX_SESSIONS_KEPT) map.delete(map.keys().next().value)
    map.set(key, make())
  }
  return map.get(key)
}

async function historyContext(file, sessionID, cwd, env) {
  if (!sendable(file, MAX_PATH_CHARS)) return [null, "history skipped (path)"]
  if (file.includes(`${path.sep}${LIBRARY_DIRNAME}${path.sep}`)) return [null, "history skipped (library note)"]
  if (hungLately()) return [null, "history skipped (server hung lately)"]
  const files = sessionID ? remembered(seen, sessionID, () => new Set()) : new Set()
  if (files.has(file)) return [null, SEEN]
  files.add(file)
  const body = withBudget(env, "LIBRARIAN_HISTORY_BUDGET", { path: file, limit: LIMIT })
  if (cwd) body.cwd = cwd
  const root = dotgit(path.dirname(file))?.[0]
  if (root && sendable(root, MAX_PATH_CHARS)) {
    body.root = root
    const remote = gitRemote(root)
    if (remote) body.remote = remote
  }
  // The task at hand: the session's latest prompt (no hook here hands the server a transcript).
  const task = sessionID ? tasks.get(sessionID) : undefined
  if (task) body.task = task
  if (sendable(sessionID, 200)) body.session_id = sessionID
  try {
    return told(await post(env, "history", body, intEnv(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", HISTORY_TIMEOUT_MS)), "history")
  } catch (error) {
    files.delete(file) // asked again at a later touch
    return [null, `history failed (${error instanceof Failed ? error.message : error?.name || "error"})`]
  }
}

// [text, outcome] for a file tool's call of `agent`'s: the history of the first file it touched
// that this session was not told of yet. Never throws.
export async function fileHistory(agent, tool, args, sessionID, cwd, env) {
  if (isOff(env.LIBRARIAN_HISTORY, env.LIBRARIAN_RECALL)) return [null, "history off"]
  if (hungLately()) return [null, "history skipped (server hung lately)"]
  const [files, outcome] = await touched(agent, tool, args, cwd, env)
  let text = null
  let said = SEEN
  for (const file of files) {
    ;[text, said] = await historyContext(file, sessionID, cwd, env)
    if (said !== SEEN) break
  }
  return [text, files.length ? `${outcome}; ${said}` : outcome]
}

// -- what every agent's plugin needs beside ------------------------------------------------------

// Where `agent`'s plugin logs: LIBRARIAN_LOG, else a file of its own, as the Python hooks of
// every agent but Claude Code (librarian_hooklib.log_path): $XDG_STATE_HOME/librarian/AGENT.log.
export function logFile(agent, env) {
  if (env.LIBRARIAN_LOG) return env.LIBRARIAN_LOG
  return path.join(env.XDG_STATE_HOME || path.join(homedir(), ".local", "state"), "librarian", `${agent}.log`)
}

// One line per call, as the Python hooks' log (librarian_hooklib.log_line). Never throws.
export function logLine(hook, outcome, ms, file) {
  try {
    try {
      if (statSync(file).size > LOG_MAX_BYTES) renameSync(file, file + ".1")
    } catch {}
    mkdirSync(path.dirname(file), { recursive: true })
    const stamp = new Date().toISOString().replace(/\.\d+Z$/, "Z")
    appendFileSync(file, `${stamp} ${hook} ${ms.toFixed(1)}ms ${outcome}`.replaceAll("\n", " ").slice(0, 1000) + "\n")
  } catch {}
}

// The environment the plugin asks with: a server the agent's configuration names (`librarian
// connect AGENT --server URL`) in place of LIBRARIAN_MCP_URL, as the Python hooks' runner puts
// it (run-hook.sh --server=URL); an explicit LIBRARIAN_RECALL_URL still wins, as it does there.
export function withServer(env, server) {
  if (typeof server !== "string" || !/^https?:\/\//.test(server)) return env
  return { ...env, LIBRARIAN_MCP_URL: server }
}

// The working folder an agent names, when the server may be told it.
export function workingDir(directory) {
  return sendable(directory, MAX_PATH_CHARS) && path.isAbsolute(directory) ? directory : null
}

// Keep `prompt` as the session's task at hand (the file history's `task`): a bare command
// (`/exit`) does not say what the work is.
export function rememberPrompt(sessionID, prompt) {
  const words = typeof prompt === "string" ? prompt.trim().split(/\s+/).filter(Boolean) : []
  if (!sessionID || !words.length || (words.length === 1 && words[0].startsWith("/"))) return
  remembered(tasks, sessionID, () => "")
  tasks.set(sessionID, Array.from(prompt).slice(0, MAX_TASK_CHARS).join(""))
}

export { isObject }
