"""Running the service: the watch of `up`, incidents, alerts, Dagster's home, tokens."""
