"""What a session is remembered as: its digest (offline or LLM), tags, the chunks searched."""
