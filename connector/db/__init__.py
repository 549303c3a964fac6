"""Everything that talks to Postgres: server lifecycle and migrations (`database`), SQL text (`queries`), and the
typed operations the pipeline uses (`store`)."""
