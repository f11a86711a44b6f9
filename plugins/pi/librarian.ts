// Librarian for Pi (named in Pi's settings.json "extensions" by `librarian connect pi`, loaded by
// Pi's own jiti; with `--server URL`, that server under "librarian": {"server"}, serverOf):
// - `before_agent_start`: the past sessions that bear on the prompt come as a custom message
//   right after it (the model reads it as a user message; Pi stores it, not shown);
// - `tool_result` of a file tool: the history of the first file it touched that the session was
//   not told of yet, a text block at the end of the tool's result, which the model reads.

import type { ExtensionAPI } from "@mariozechner/pi-coding-agent"

import { readFileSync } from "node:fs"
import { homedir } from "node:os"
import path from "node:path"

import { fileHistory, recallContext, workingDir } from "../shared/memory.js"

const AGENT = "pi"
// Pi's file tools (dist/core/tools/): read, edit and write name their file as `path`.
const FILE_TOOLS = new Set(["read", "edit", "write"])

type Context = {
  cwd?: string
  sessionManager?: { getSessionId?: () => string }
}

// Pi's folder of the user's settings, as Pi finds it (its getAgentDir): $PI_CODING_AGENT_DIR, `~`
// the home, else ~/.pi/agent.
function agentDir(env: NodeJS.ProcessEnv): string {
  const named = (env.PI_CODING_AGENT_DIR || "").trim()
  if (!named) return path.join(homedir(), ".pi", "agent")
  if (named === "~" || named.startsWith("~/")) return path.join(homedir(), named.slice(2))
  return named
}

function serverIn(file: string): string | undefined {
  try {
    const server = JSON.parse(readFileSync(file, "utf8"))?.librarian?.server
    if (typeof server === "string") return server
  } catch {} // no settings there, or not JSON: none named
}

// The server `librarian connect pi --server URL` named in Pi's settings ("librarian": {"server"}),
// the project's over the user's, as Pi merges them; read at each call (a small file), so that a
// connection made while Pi runs holds from the next prompt.
function serverOf(cwd: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  return (cwd && serverIn(path.join(cwd, ".pi", "settings.json"))) || serverIn(path.join(agentDir(env), "settings.json"))
}

function sessionOf(ctx: Context): string | undefined {
  try {
    return ctx.sessionManager?.getSessionId?.() || undefined
  } catch {} // no session: asked without one
}

export default function librarian(pi: ExtensionAPI) {
  pi.on("before_agent_start", async (event, ctx) => {
    try {
      const prompt = typeof event?.prompt === "string" ? event.prompt : ""
      const server = serverOf(ctx?.cwd, process.env)
      const text = await recallContext(AGENT, prompt, sessionOf(ctx), workingDir(ctx?.cwd), process.env, server)
      if (text) return { message: { customType: "librarian", content: text, display: false } }
    } catch {} // memory must never break a prompt
    return undefined
  })

  pi.on("tool_result", async (event, ctx) => {
    if (!FILE_TOOLS.has(event?.toolName) || event.isError) return undefined
    try {
      const server = serverOf(ctx?.cwd, process.env)
      const text = await fileHistory(AGENT, event.toolName, event.input, sessionOf(ctx), workingDir(ctx?.cwd), process.env, server)
      if (text && Array.isArray(event.content)) return { content: [...event.content, { type: "text" as const, text }] }
    } catch {}
    return undefined
  })
}
