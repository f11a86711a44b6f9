// Librarian for OpenCode (written to opencode.json's "plugin" by `librarian connect opencode`;
// with `--server URL`, `[this file's URL, {"server": URL}]`, whose options say which server):
// - `chat.message`: the past sessions that bear on the typed prompt join the message as a
//   synthetic text part after it (the model reads it; OpenCode stores it, marked synthetic);
// - `tool.execute.after` of a file tool: the history of the first file it touched that the
//   session was not told of yet ends the tool's output, which the model reads as its result.
// Every exported function of a module is an OpenCode plugin: this one exports one.

import { fileHistory, isObject, recallContext, workingDir } from "../shared/memory.js"

const AGENT = "opencode"
// OpenCode's file tools (packages/opencode/src/tool/): read, edit and write name `filePath`;
// multiedit `edits[].filePath`; apply_patch (which GPT models get in place of edit and write)
// names its files in the patch. The server's reader says which files each touches.
const FILE_TOOLS = new Set(["read", "edit", "write", "multiedit", "apply_patch", "patch"])

function typedText(parts) {
  if (!Array.isArray(parts)) return ""
  return parts
    .filter((p) => isObject(p) && p.type === "text" && !p.synthetic && !p.ignored && typeof p.text === "string")
    .map((p) => p.text)
    .join("\n")
}

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// A part id that sorts after every part of the message (OpenCode orders parts by id): its
// ascending form, "prt_" + 12 hex digits of (ms * 0x1000 + a counter) + 14 base62 characters.
function partIdAfter(parts) {
  let stamp = (BigInt(Date.now()) * 0x1000n) & 0xffffffffffffn
  for (const part of Array.isArray(parts) ? parts : []) {
    const id = typeof part?.id === "string" ? part.id : ""
    const hex = id.slice(4, 16)
    if (id.startsWith("prt_") && /^[0-9a-f]{12}$/.test(hex) && BigInt("0x" + hex) >= stamp)
      stamp = BigInt("0x" + hex) + 1n
  }
  const random = crypto.getRandomValues(new Uint8Array(14))
  return "prt_" + stamp.toString(16).padStart(12, "0").slice(-12) + Array.from(random, (b) => BASE62[b % 62]).join("")
}

export const LibrarianPlugin = async ({ directory }, options) => {
  const cwd = workingDir(directory)
  const server = options?.server
  return {
    "chat.message": async (input, output) => {
      try {
        const message = output?.message
        const sessionID = input?.sessionID || message?.sessionID
        const text = await recallContext(AGENT, typedText(output?.parts), sessionID, cwd, process.env, server)
        if (text && message && Array.isArray(output.parts))
          output.parts.push({
            id: partIdAfter(output.parts),
            sessionID: message.sessionID,
            messageID: message.id,
            type: "text",
            synthetic: true,
            text,
          })
      } catch {} // memory must never break a prompt
    },
    "tool.execute.after": async (input, output) => {
      if (!FILE_TOOLS.has(input?.tool)) return
      try {
        const text = await fileHistory(AGENT, input.tool, input.args, input.sessionID, cwd, process.env, server)
        if (text && typeof output?.output === "string") output.output += "\n\n" + text
      } catch {}
    },
  }
}
