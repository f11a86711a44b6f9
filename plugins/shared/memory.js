// What Librarian's plugins for other agents share (plugins/<agent>/): ask the recall server
// what it remembers, within the Python hooks' deadlines, and word it as they do.
//
// - recallContext(prompt, cwd): `POST /recall` within LIBRARIAN_RECALL_TIMEOUT_MS (800 ms), the
//   answer rendered as hooks/librarian_recall.py renders it (HEADER first, whole lines within
//   LIBRARIAN_RECALL_BUDGET), the files of this repository's sessions checked against git.
// - fileHistory(agent, tool, args, sessionID, cwd): `POST /touches` (which files the call
//   touches, by the server's reader of `agent`), then `POST /history` for the first file not
//   seen yet in the session, each within LIBRARIAN_HISTORY_TIMEOUT_MS (300 ms), rendered as
//   hooks/librarian_history.py renders it.
//
// Each text starts with the header the Python hooks use (librarian_recall.HEADER,
// librarian_history.HEADER): Librarian cuts its own context from a transcript it reads back on
// that header (core/capture/own_context.py). Fails open: a server that is down, slow or wrong
// gives no text, and nothing here throws. A server that missed a deadline is left alone for 30 s,
// longer while it keeps missing them. LIBRARIAN_RECALL=off turns both off, LIBRARIAN_HISTORY=off the file history;
// LIBRARIAN_MCP_URL (or LIBRARIAN_RECALL_URL) says where the server is, unless the agent's
// configuration names one (withServer), and LIBRARIAN_MCP_TOKEN goes as a Bearer token. tests/hooks/test_opencode_plugin.py holds the texts to the Python
// hooks' own.
//
// Plain JavaScript, the runtime's own fetch and node: modules: nothing to install. Runs in Bun
// (OpenCode) and Node (Pi).

import { execFile } from "node:child_process"
import { appendFileSync, closeSync, constants, fstatSync, openSync, readSync, renameSync, statSync } from "node:fs"
import { homedir, userInfo } from "node:os"
import path from "node:path"

const DEFAULT_URL = "http://127.0.0.1:3201/recall"
const RECALL_HEADER =
  "Librarian remembers past sessions that may bear on this prompt (from memory, possibly out " +
  "of date; the MCP tool get_digest with a session_id returns the whole session):"
const historyHeader = (shown) =>
  `Librarian remembers earlier sessions that worked on ${shown} (from memory, possibly out of ` +
  "date; the MCP tool get_digest with a session_id returns the whole session):"
const RECALL = { budget: 1500, timeoutMs: 800 }
const HISTORY = { budget: 1200, timeoutMs: 300 }
const MIN_BUDGET = 200
const MAX_BUDGET = 10000
const MIN_TIMEOUT_MS = 50
const MAX_TIMEOUT_MS = 5000
const MIN_WORDS = 4
const LIMIT = 3
const MAX_QUERY_CHARS = 2000
const MAX_TASK_CHARS = 2000
const MAX_RESPONSE_BYTES = 1024 * 1024
const MAX_PATH_CHARS = 4096
const MAX_BRANCH_CHARS = 200
const MAX_GIT_WALK = 64
const MAX_GIT_READ = 4200
const SHOWN_FILES = 3
const MAX_FILES = 20
const MIN_GIT_MS = 40
const MAX_GIT_COMMITS = 1000
const MAX_TOOL_TEXT = 8000
const MAX_TOUCHED = 20
const LIBRARY_DIRNAME = "_memory_library"
const UNREACHABLE_MS = 30000
const UNREACHABLE_MAX_MS = 600000
const MAX_SESSIONS_KEPT = 500
const LOG_MAX_BYTES = 256 * 1024
const OFF = ["off", "0", "false", "no"]
// As hooks/librarian_recall.py names each agent's sessions (a copy of LABELS there).
const AGENT_LABELS = {
  "claude-code": "Claude Code",
  codex: "Codex",
  gemini: "Gemini CLI",
  opencode: "OpenCode",
  copilot: "Copilot CLI",
  pi: "Pi",
}
const HOME_AGENT = "claude-code"
const SEEN = "history seen"

class Failed extends Error {}

// -- the server ---------------------------------------------------------------------------------

function intEnv(env, name, fallback, low, high) {
  const raw = env[name]
  const value = raw === undefined || raw === "" ? fallback : Number(raw)
  return Math.max(low, Math.min(high, Number.isInteger(value) ? value : fallback))
}

function isOff(value) {
  return OFF.includes(String(value ?? "").trim().toLowerCase())
}

function recallUrl(env) {
  if (env.LIBRARIAN_RECALL_URL) return env.LIBRARIAN_RECALL_URL
  const mcp = (env.LIBRARIAN_MCP_URL || "").replace(/\/+$/, "")
  if (!mcp) return DEFAULT_URL
  return mcp.endsWith("/mcp") ? mcp.slice(0, -"/mcp".length) + "/recall" : mcp + "/recall"
}

function besideRecall(env, name) {
  const url = recallUrl(env).replace(/\/+$/, "")
  return url.endsWith("/recall") ? url.slice(0, -"/recall".length) + "/" + name : url + "/" + name
}

// A server that hangs costs every call its whole deadline; one that is down refuses at once. So
// one that missed a deadline is left alone for a window that doubles with each miss in a row (30 s
// up to 10 min), as librarian_hooklib.left_alone_s does; after it, one call asks again.
const hangs = { count: 0, last: 0 }

function hungLately() {
  if (hangs.count <= 0) return false
  const window = Math.min(UNREACHABLE_MS * 2 ** Math.min(hangs.count - 1, 10), UNREACHABLE_MAX_MS)
  return Date.now() - hangs.last < window
}

function countHang(hung) {
  if (hung) {
    hangs.count += 1
    hangs.last = Date.now()
  } else hangs.count = 0
}

async function readBounded(response) {
  if (!response.body) return ""
  const reader = response.body.getReader()
  const chunks = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > MAX_RESPONSE_BYTES) {
      reader.cancel().catch(() => {})
      throw new Failed("answer too large")
    }
    chunks.push(value)
  }
  const all = new Uint8Array(size)
  let at = 0
  for (const chunk of chunks) {
    all.set(chunk, at)
    at += chunk.byteLength
  }
  return new TextDecoder("utf-8", { fatal: true }).decode(all)
}

// One POST; the answer as an object. Throws Failed (its message is safe to log: never the
// prompt nor the token).
async function post(url, body, signal, env) {
  let parsed
  try {
    parsed = new URL(url)
  } catch {
    throw new Failed("bad url")
  }
  if (!["http:", "https:"].includes(parsed.protocol) || !parsed.hostname) throw new Failed("bad url")
  // One connection a request, as the Python hooks' (`Connection: close`): a pooled one the
  // server has closed meanwhile (an HTTP/1.0 server, an idle timeout) fails as ECONNRESET.
  const headers = { "Content-Type": "application/json", Accept: "application/json", Connection: "close" }
  if (env.LIBRARIAN_MCP_TOKEN) headers.Authorization = "Bearer " + env.LIBRARIAN_MCP_TOKEN
  let status, data
  try {
    const response = await fetch(url, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal,
      redirect: "error",
      keepalive: false,
    })
    status = response.status
    data = await readBounded(response)
  } catch (error) {
    if (error instanceof Failed) throw error
    // Its code (ECONNREFUSED) or class only: a message can carry addresses.
    throw new Failed(signal.aborted ? "timeout" : String(error?.code || error?.name || "error").slice(0, 40))
  }
  if (status === 401 || status === 403) throw new Failed(`refused (${status})`)
  if (status !== 200) throw new Failed(`http ${status}`)
  let answer
  try {
    answer = JSON.parse(data)
  } catch {
    throw new Failed("answer is not JSON")
  }
  if (!isObject(answer)) throw new Failed("answer is not an object")
  return answer
}

// `work(signal)` within `ms`: past it the signal aborts the request, and the wait ends anyway.
async function within(ms, work) {
  const signal = AbortSignal.timeout(ms)
  let timer
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Failed("timeout")), ms + 20)
  })
  try {
    return await Promise.race([work(signal), late])
  } catch (error) {
    if (signal.aborted || (error instanceof Failed && error.message === "timeout")) throw new Failed("timeout")
    throw error
  } finally {
    clearTimeout(timer)
  }
}

// -- text ---------------------------------------------------------------------------------------

const WHITESPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|(?! )\p{Zs}/u

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value)
}

function len(text) {
  let n = 0
  for (const _ of text) n += 1
  return n
}

// One line, no control characters: a memory must not reshape the context around it.
function clean(value, limit = 2000) {
  if (typeof value !== "string") return ""
  const text = value.split(WHITESPACE).filter(Boolean).join(" ")
  return Array.from(text).slice(0, limit).filter((c) => !UNPRINTABLE.test(c)).join("")
}

function sendable(text, limit) {
  if (typeof text !== "string" || !text || len(text) > limit || text.includes("\0")) return false
  return text.isWellFormed ? text.isWellFormed() : !/[\ud800-\udfff]/.test(text)
}

function skipReason(prompt) {
  if (typeof prompt !== "string" || !prompt.trim()) return "no prompt"
  if (prompt.trimStart().startsWith("/")) return "slash command"
  if (prompt.split(WHITESPACE).filter(Boolean).length < MIN_WORDS) return "short prompt"
  return null
}

// A teammate's session says whose ("alice's Codex session"); this machine's person's does not.
function sessionWord(agent, person) {
  const name = typeof agent === "string" ? agent : ""
  let word = "session"
  if (name in AGENT_LABELS) word = name === HOME_AGENT ? "session" : `${AGENT_LABELS[name]} session`
  else if (name.length > 0 && name.length <= 40 && /^[A-Za-z0-9-]+$/.test(name) && /[A-Za-z0-9]/.test(name))
    word = `${name} session`
  const who = clean(person, 64)
  return who && who !== ownPerson() ? `${who}'s ${word}` : word
}

function ownPerson() {
  const named = (process.env.LIBRARIAN_PERSON || "").trim()
  if (named) return named
  try {
    return userInfo().username
  } catch {
    return ""
  }
}

function dates(started, ended) {
  started = started.slice(0, 10)
  ended = ended.slice(0, 10)
  return started && ended && started !== ended ? `${started} to ${ended}` : ended
}

// -- git, for where a prompt comes from ---------------------------------------------------------

// The first MAX_GIT_READ bytes of a regular file as text; null for anything else (a FIFO named
// HEAD must not hang OpenCode: it is opened without blocking and checked before it is read).
function readStart(file) {
  let fd
  try {
    fd = openSync(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0) | (constants.O_NOCTTY ?? 0))
  } catch {
    return null
  }
  try {
    if (!fstatSync(fd).isFile()) return null
    const buffer = Buffer.alloc(MAX_GIT_READ)
    const read = readSync(fd, buffer, 0, MAX_GIT_READ, 0)
    return new TextDecoder("utf-8", { fatal: true }).decode(buffer.subarray(0, read))
  } catch {
    return null
  } finally {
    try {
      closeSync(fd)
    } catch {}
  }
}

// The first `.git` at or above `cwd`, as git finds it: [folder, its path, whether a folder].
function dotgit(cwd) {
  try {
    let folder = path.resolve(cwd)
    for (let i = 0; i < MAX_GIT_WALK; i++) {
      const found = path.join(folder, ".git")
      try {
        return [folder, found, statSync(found).isDirectory()]
      } catch {}
      const parent = path.dirname(folder)
      if (parent === folder) return null
      folder = parent
    }
  } catch {}
  return null
}

function gitRoot(cwd) {
  const found = dotgit(cwd)
  return found ? found[0] : null
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

function branchIn(head) {
  const text = readStart(head)
  if (!text) return null
  const line = text.split(/\r?\n/)[0].trim()
  const prefix = "ref: refs/heads/"
  if (!line.startsWith(prefix)) return null
  const name = line.slice(prefix.length)
  if (!sendable(name, MAX_BRANCH_CHARS) || /\s/.test(name) || UNPRINTABLE.test(name)) return null
  return name
}

// The git folder of the repository holding `cwd`: the first `.git` above it, a folder or, for a
// worktree or submodule, a file `gitdir: <path>` (relative to the folder holding it).
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
  return gitdir ? branchIn(path.join(gitdir, "HEAD")) : null
}

// For each session of this repository that changed files: how many changed since it ended, in
// how many commits; one `git log` each, within what is left before `deadline`; silent on failure.
async function markStale(sessions, cwd, deadline) {
  if (!cwd) return
  for (const session of sessions) {
    const left = deadline - Date.now()
    if (!(session.here && session.files.length && session.ended)) continue
    if (left < MIN_GIT_MS) return
    const args = ["-C", cwd, "log", `--since=${session.ended}`, `--max-count=${MAX_GIT_COMMITS}`,
      "--format=%x1e", "--name-only", "--relative", "HEAD", "--"]
    const output = await new Promise((resolve) => {
      try {
        execFile("git", args, { timeout: left, encoding: "utf8", maxBuffer: 8 * 1024 * 1024, windowsHide: true },
          (error, stdout) => resolve(error ? null : stdout))
      } catch {
        resolve(null)
      }
    })
    if (output === null) return
    const commits = output.split("\x1e").length - 1
    const touched = new Set(output.split("\n").map((l) => l.trim()).filter((l) => l && l !== "\x1e"))
    const changed = session.files.filter((f) => touched.has(f)).length
    if (commits) {
      const many = commits >= MAX_GIT_COMMITS ? `${commits}+` : String(commits)
      session.stale = `${changed} of its ${session.files.length} files changed since, ${many} commits`
    } else session.stale = "no commits since"
  }
}

// -- recall: hooks/librarian_recall.py ----------------------------------------------------------

function filesOf(value) {
  if (!Array.isArray(value)) return []
  return value.slice(0, MAX_FILES).map((v) => clean(v, 300)).filter(Boolean)
}

// Results grouped by session, best first: each with its highlights (never the matched chunk's
// own text where there are highlights), malformed entries skipped.
function sessionsOf(answer) {
  const results = answer.results
  if (!Array.isArray(results)) throw new Failed("answer has no results list")
  const sessions = new Map()
  for (const item of results) {
    if (!isObject(item)) continue
    const sid = clean(item.session_id, 200)
    const text = clean(item.text)
    if (!sid || !text) continue
    if (!sessions.has(sid))
      sessions.set(sid, {
        id: sid,
        project: clean(item.project, 100),
        agent: item.agent,
        person: item.person,
        started: clean(item.started_at, 40),
        ended: clean(item.date, 40),
        files: filesOf(item.files),
        here: item.context === "project" || item.context === "branch",
        stale: "",
        branch: clean(item.git_branch, MAX_BRANCH_CHARS),
        title: clean(item.title, 200).replaceAll('"', "'"),
        summary: clean(item.summary, 400),
        bullets: [],
      })
    const session = sessions.get(sid)
    const lines = Array.isArray(item.highlights)
      ? item.highlights.map((h) => clean(h, 400))
      : item.section !== "exchange"
        ? [text]
        : []
    for (const line of lines)
      if (line && line !== session.summary && !session.bullets.includes(line)) session.bullets.push(line)
  }
  for (const session of sessions.values())
    if (session.files.length) {
      const more = session.files.length - SHOWN_FILES
      session.bullets.push("files: " + session.files.slice(0, SHOWN_FILES).join(", ") + (more > 0 ? ` (+${more} more)` : ""))
    }
  return [...sessions.values()]
}

function recallHead(session, withSummary) {
  let where = [session.project, dates(session.started, session.ended)].filter(Boolean).join(", ")
  if (session.branch) where += (where ? ", " : "") + "branch " + session.branch
  if (session.stale) where += `; ${session.stale}`
  let head = `- ${sessionWord(session.agent, session.person)} ${session.id}` + (where ? ` (${where})` : "")
  if (session.title) head += ` "${session.title}"`
  return head + (withSummary && session.summary ? `: ${session.summary}` : "")
}

// The context within `budget` characters, whole lines only: the sessions named first (best
// first), then their summaries, then their bullets a round at a time.
function renderRecall(sessions, budget) {
  let used = len(RECALL_HEADER)
  const heads = []
  for (const session of sessions) {
    const line = recallHead(session, false)
    if (used + 1 + len(line) > budget) break
    heads.push(line)
    used += 1 + len(line)
  }
  if (!heads.length) return [null, 0]
  const named = sessions.slice(0, heads.length)
  named.forEach((session, i) => {
    const fuller = recallHead(session, true)
    if (used + len(fuller) - len(heads[i]) <= budget) {
      used += len(fuller) - len(heads[i])
      heads[i] = fuller
    }
  })
  const shown = named.map(() => [])
  const rows = Math.max(...named.map((s) => s.bullets.length))
  for (let row = 0; row < rows; row++)
    named.forEach((session, i) => {
      if (row < session.bullets.length) {
        const line = "  - " + session.bullets[row]
        if (used + 1 + len(line) <= budget) {
          shown[i].push(line)
          used += 1 + len(line)
        }
      }
    })
  const lines = [RECALL_HEADER]
  heads.forEach((head, i) => lines.push(head, ...shown[i]))
  return [lines.join("\n"), heads.length]
}

// [text, outcome] for a prompt: the past sessions that bear on it. Never throws.
export async function recallContext(prompt, cwd, env) {
  if (isOff(env.LIBRARIAN_RECALL)) return [null, "recall off"]
  const reason = skipReason(prompt)
  if (reason) return [null, `recall skipped (${reason})`]
  if (hungLately()) return [null, "recall skipped (server hung lately)"]
  if (!sendable(cwd, MAX_PATH_CHARS) || !path.isAbsolute(cwd)) cwd = null
  const start = Date.now()
  const timeoutMs = intEnv(env, "LIBRARIAN_RECALL_TIMEOUT_MS", RECALL.timeoutMs, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)
  let sessions
  try {
    sessions = await within(timeoutMs, async (signal) => {
      const body = { query: Array.from(prompt).slice(0, MAX_QUERY_CHARS).join(""), limit: LIMIT }
      if (cwd) {
        body.cwd = cwd
        const branch = gitBranch(cwd)
        if (branch) body.git_branch = branch
      }
      return sessionsOf(await post(recallUrl(env), body, signal, env))
    })
    await markStale(sessions, cwd, start + timeoutMs)
  } catch (error) {
    const why = error instanceof Failed ? error.message : error?.name || "error"
    countHang(why === "timeout")
    return [null, `recall failed (${why})`]
  }
  countHang(false)
  const budget = intEnv(env, "LIBRARIAN_RECALL_BUDGET", RECALL.budget, MIN_BUDGET, MAX_BUDGET)
  const [text, named] = renderRecall(sessions, budget)
  if (text === null) return [null, "recall nothing relevant"]
  return [text, `recall added ${named} sessions, ${len(text)} chars`]
}

// -- file history: hooks/librarian_history.py ---------------------------------------------------

function historyOff(env) {
  return isOff(env.LIBRARIAN_HISTORY) || isOff(env.LIBRARIAN_RECALL)
}

function historyTimeout(env) {
  return intEnv(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", HISTORY.timeoutMs, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS)
}

// [action, files] of a tool call, as the server's reader of OpenCode says; relative paths are
// joined to the directory.
async function touched(agent, tool, args, cwd, env) {
  const toolInput = {}
  for (const [key, value] of Object.entries(isObject(args) ? args : {}))
    toolInput[key] = typeof value === "string" ? value.slice(0, MAX_TOOL_TEXT) : value
  const body = { agent, tool_name: tool.slice(0, 200), tool_input: toolInput }
  if (cwd) body.cwd = cwd
  let answer
  try {
    answer = await within(historyTimeout(env), (signal) => post(besideRecall(env, "touches"), body, signal, env))
  } catch (error) {
    const why = error instanceof Failed ? error.message : error?.name || "error"
    countHang(why === "timeout")
    return ["", [], `touches failed (${why})`]
  }
  const { action, paths } = answer
  if (typeof action !== "string" || !Array.isArray(paths)) return ["", [], "touches failed (no paths)"]
  const base = cwd || process.cwd()
  const files = paths
    .slice(0, MAX_TOUCHED)
    .filter((p) => sendable(p, MAX_PATH_CHARS))
    .map((p) => path.normalize(path.resolve(base, p)))
  return [action, files, `${action || "nothing"} of ${files.length} files`]
}

function historyLine(item) {
  const sid = clean(item.session_id, 200)
  if (!sid) return null
  const where = [dates(clean(item.started_at, 40), clean(item.date, 40))]
  const branch = clean(item.git_branch, MAX_BRANCH_CHARS)
  if (branch) where.push("branch " + branch)
  const edits = Number.isInteger(item.edits) ? item.edits : 0
  where.push(item.changed ? `changed it (${edits} edit${edits !== 1 ? "s" : ""})` : "read it")
  const since = clean(item.changed_since, 60)
  if (since) where.push(`the file ${since}`)
  const head = `- ${sessionWord(item.agent, item.person)} ${sid} (` + where.filter(Boolean).join("; ") + ")"
  const title = clean(item.title, 200).replaceAll('"', "'")
  const summary = clean(item.summary, 400)
  return head + (title ? ` "${title}"` : "") + (summary ? `: ${summary}` : "")
}

// The context within `budget` characters: every session's line first, then the digest lines
// that name the file and the highlights, a round at a time.
function renderHistory(answer, shown, budget) {
  const results = answer.results
  if (!Array.isArray(results)) throw new Failed("answer has no results list")
  const text = historyHeader(shown)
  let used = len(text)
  const heads = []
  const extras = []
  for (const item of results) {
    const line = isObject(item) ? historyLine(item) : null
    if (line === null || used + 1 + len(line) > budget) continue
    heads.push(line)
    used += 1 + len(line)
    const some = (v) => (Array.isArray(v) ? v.slice(0, 2) : [])
    const lines = [...some(item.lines), ...some(item.highlights)].map((x) => clean(x, 400))
    extras.push(lines.filter((x, i) => x && !lines.slice(0, i).includes(x)))
  }
  if (!heads.length) return [null, 0]
  const kept = heads.map(() => [])
  const rows = Math.max(...extras.map((e) => e.length))
  for (let row = 0; row < rows; row++)
    extras.forEach((lines, i) => {
      if (row < lines.length && used + 5 + len(lines[row]) <= budget) {
        kept[i].push("  - " + lines[row])
        used += 5 + len(lines[row])
      }
    })
  const out = [text]
  heads.forEach((head, i) => out.push(head, ...kept[i]))
  return [out.join("\n"), heads.length]
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
  if (historyOff(env)) return [null, "history off"]
  if (!sendable(file, MAX_PATH_CHARS)) return [null, "history skipped (path)"]
  if (file.includes(`${path.sep}${LIBRARY_DIRNAME}${path.sep}`)) return [null, "history skipped (library note)"]
  if (hungLately()) return [null, "history skipped (server hung lately)"]
  const files = sessionID ? remembered(seen, sessionID, () => new Set()) : new Set()
  if (files.has(file)) return [null, SEEN]
  files.add(file)
  const body = { path: file, limit: LIMIT }
  if (cwd) body.cwd = cwd
  const root = gitRoot(path.dirname(file))
  if (root && sendable(root, MAX_PATH_CHARS)) {
    body.root = root
    const remote = gitRemote(root)
    if (remote) body.remote = remote
  }
  // The task at hand: the session's latest prompt (no hook here hands the server a transcript).
  const task = sessionID ? tasks.get(sessionID) : undefined
  if (task) body.task = task
  if (sendable(sessionID, 200)) body.session_id = sessionID
  let text, named
  try {
    const answer = await within(historyTimeout(env), (signal) => post(besideRecall(env, "history"), body, signal, env))
    const shown = clean(answer.path, 300) || path.basename(file)
    const budget = intEnv(env, "LIBRARIAN_HISTORY_BUDGET", HISTORY.budget, MIN_BUDGET, MAX_BUDGET)
    ;[text, named] = renderHistory(answer, shown, budget)
  } catch (error) {
    files.delete(file) // asked again at a later touch
    const why = error instanceof Failed ? error.message : error?.name || "error"
    countHang(why === "timeout")
    return [null, `history failed (${why})`]
  }
  countHang(false)
  if (text === null) return [null, "history none"]
  return [text, `history added ${named} sessions, ${len(text)} chars`]
}

// [text, outcome] for a file tool's call of `agent`'s: the history of the first file it touched
// that this session was not told of yet. Never throws.
export async function fileHistory(agent, tool, args, sessionID, cwd, env) {
  if (historyOff(env)) return [null, "history off"]
  if (hungLately()) return [null, "history skipped (server hung lately)"]
  const [, files, outcome] = await touched(agent, tool, args, cwd, env)
  if (!files.length) return [null, outcome]
  let text = null
  let said = SEEN
  for (const file of files) {
    ;[text, said] = await historyContext(file, sessionID, cwd, env) // the first not seen yet
    if (said !== SEEN) break
  }
  return [text, `${outcome}; ${said}`]
}

// -- what every agent's plugin needs beside ------------------------------------------------------

// One line per call, as the Python hooks' log (librarian_hooklib.log_line): LIBRARIAN_LOG, else
// ~/.claude/librarian.log where that folder is (none is made for it). Never throws.
export function logLine(hook, outcome, ms, env) {
  try {
    const explicit = env.LIBRARIAN_LOG
    const file = explicit || path.join(homedir(), ".claude", "librarian.log")
    try {
      if (statSync(file).size > LOG_MAX_BYTES) renameSync(file, file + ".1")
    } catch {}
    if (!explicit) statSync(path.dirname(file)) // no folder made for it: the log is Claude Code's
    const stamp = new Date().toISOString().replace(/\.\d+Z$/, "Z")
    const line = `${stamp} ${hook} ${ms.toFixed(1)}ms ${outcome}`.replaceAll("\n", " ").slice(0, 1000)
    appendFileSync(file, line + "\n")
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

// Whether a prompt says what the work is: a bare command (`/exit`) does not.
function asks(prompt) {
  const words = prompt.split(WHITESPACE).filter(Boolean)
  return words.length > 0 && !(words.length === 1 && words[0].startsWith("/"))
}

// Keep `prompt` as the session's task at hand (the file history's `task`).
export function rememberPrompt(sessionID, prompt) {
  if (!sessionID || typeof prompt !== "string" || !asks(prompt)) return
  remembered(tasks, sessionID, () => "")
  tasks.set(sessionID, Array.from(prompt).slice(0, MAX_TASK_CHARS).join(""))
}

export { isObject }
