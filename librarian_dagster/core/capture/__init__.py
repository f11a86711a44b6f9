"""Reading what every agent wrote: a reader per agent into one session model, the folders, skips."""
