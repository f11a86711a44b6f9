"""Running the service: alerts and Telegram, Dagster's home, the recall server's tokens."""
