"""Reading what Claude Code wrote: transcripts into sessions, what the mirror holds, skips."""
