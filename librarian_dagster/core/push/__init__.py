"""Sending this machine's sessions to a team's server (`librarian push`): redacted here, one
whole session a request."""
